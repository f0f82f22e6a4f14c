// FindMissingBlobs on the wire (proto/remote_execution.proto), read and
// written without protobuf's message objects. Pure functions of bytes, like
// request.hpp.
//
// Why: protobuf's objects cost a FindMissingBlobs of 1,000 digests two heap
// blocks per digest to parse (a Digest and its 64-character hash) and two
// more per missing digest to answer (each copied into the response), and
// as many frees: malloc and free were a fifth of the server's samples
// (docs/performance.md, "abf serve": gRPC). Here the request is read in
// place, the digests decoded straight from their hex, and each missing
// entry is copied into the answer byte for byte, as it was sent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "abf/digest.hpp"
#include "abf/server/request.hpp"

namespace abf::server {

// A parsed FindMissingBlobsRequest{instance_name = 1, blob_digests = 2
// (Digest{hash = 1, size_bytes = 2}), digest_function = 3}.
struct FindMissingBlobsWire {
  std::string_view instance_name;     // into the request's bytes
  std::uint64_t digest_function = 0;  // DigestFunction.Value (0 UNKNOWN, 1 SHA256)
  std::size_t count = 0;              // blob_digests entries
  // Decoded only when count <= the limit given: each entry's digest, and
  // where its encoded Digest message lies in the request.
  std::vector<Digest> digests;
  struct Record {
    std::uint32_t offset = 0, size = 0;
  };
  std::vector<Record> records;
  // The first entry that is not a SHA-256 digest (400 "invalid_digest"
  // naming blob_digests[i], as parse_grpc_digest words it); answered after
  // the caller's other checks, in their order (docs/serve.md).
  std::optional<RequestError> digest_error;
};

// Reads a serialized FindMissingBlobsRequest as protobuf does: fields in any
// order, the last value of a field given twice wins, fields of other
// numbers or wire types skipped. 400 "invalid_request" for bytes that are
// not such a message (a truncated field, a varint over 10 bytes, a group:
// groups are deprecated and never in this API). Entries past `max_digests`
// are counted, not decoded.
RequestResult<FindMissingBlobsWire> parse_find_missing_blobs(std::span<const std::uint8_t> bytes,
                                                             std::size_t max_digests);

// The bytes of a FindMissingBlobsResponse{missing_blob_digests = 2} holding
// the request's entries `missing` (indices into `wire.records`, in order),
// each exactly as it was sent (size_bytes and any unknown fields kept).
std::size_t find_missing_blobs_response_size(const FindMissingBlobsWire& wire,
                                             std::span<const std::uint32_t> missing);
void encode_find_missing_blobs_response(std::span<const std::uint8_t> request,
                                        const FindMissingBlobsWire& wire,
                                        std::span<const std::uint32_t> missing,
                                        std::span<std::uint8_t> out);

}  // namespace abf::server
