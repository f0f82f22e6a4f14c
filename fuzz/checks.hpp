// The properties each fuzz target checks, one function per target, shared
// by the libFuzzer entry point (fuzz/fuzzer.cc, built by scripts/fuzz with
// clang) and the corpus replay test (tests/fuzz_replay_test.cc, built with
// the normal build), so a committed input checks exactly what it did while
// fuzzing.
//
// Every check returns "" when all its properties hold for the input, else a
// description of the first that broke. None may crash, hang or leak on any
// input; the sanitizers of the fuzz build catch those.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace abf::fuzz {

// Input: one control byte, then snapshot bytes. Control bit 0 recomputes
// the payload checksum over the bytes after the header, bit 1 the header
// checksum (of the format version the header names), so mutations reach
// the rules behind the checksums; with neither the bytes are taken as
// they are. The snapshot is parsed with no key and with the golden key
// (000102...0f), from memory and from a file (copied and mapped).
// Properties: memory and file agree (same error code, or same filter);
// a header error is the loader's error; a snapshot that loads re-serializes
// to the same bytes (formatVersion 2), or to formatVersion 2 with the same
// payload and fields (formatVersion 1); it loads with exactly the key its
// protocol needs; the scalar and SIMD engines and might_contain give the
// same answer for every probed digest (a maybe never becomes absent).
std::string check_snapshot(std::span<const std::uint8_t> data);

// Input: one control byte, then ABFX index bytes (docs/protocol.md, section
// 14). Control bit 0 recomputes the block table and its checksum from the
// digests, bit 1 the header checksum, so mutations reach the rules behind
// them. The index is parsed from memory and loaded from a file (copied and
// mapped). Properties: all three agree (same error code, or all load); a
// header error is the loader's error; a loaded index re-serializes to the
// same bytes; batch and single lookups of its digests and their one-bit
// neighbours equal std::binary_search.
std::string check_index(std::span<const std::uint8_t> data);

// Input: one control byte, then ABXS index-set manifest bytes
// (docs/protocol.md section 14, "Index sets"). Control bit 0 recomputes the
// body checksum, bit 1 the header checksum, so mutations reach the field
// rules behind them. Properties: the parser never reads out of bounds; a
// manifest it accepts encodes back to the same bytes, holds 1..65,536
// entries whose counts sum to the set's and whose names are distinct plain
// file names; a load of it from a file fails with the parser's code, or
// (accepted, no shard beside it) on a shard.
std::string check_index_set(std::span<const std::uint8_t> data);

// Input: text, read as hex digest lines, or as NUL-terminated records
// where its first MiB holds a NUL. Properties: the reader
// accepts the text exactly when every non-blank line (record) parses on its
// own and no line holds a NUL, yields those digests in order, and names the
// first bad line (record), or the line and byte offset of a NUL in a line;
// reading in small spans gives what read_all gives; every accepted line
// printed back as "sha256:<hex>" (and bare, upper-case, and as a sha256sum
// line) parses to the same digest, and the printed text, and the digests
// printed as sha256sum -z records, read back to the same digests.
std::string check_text_reader(std::span<const std::uint8_t> data);

// Input: one byte k, then k bytes of span sizes (each + 1 digests), then the
// binary input. The reader reads into spans of those sizes in turn.
// Properties: each read fills its span unless the input ends; the digests
// are the input's 32-byte records, in order; input that is not whole
// records fails at the offset of its stray bytes, after delivering no more
// than the whole records before them; bytes_read() is the input's size.
std::string check_binary_reader(std::span<const std::uint8_t> data);

// Input: a control byte, a 2-byte little-endian length L, then two
// snapshots: the next L bytes and the rest. Control bits 0 and 1 reseal the
// first and second snapshot (both checksums), bits 2 and 3 give each the
// golden key, bit 4 passes MergeOptions::catalog_version (from bits 5-7).
// When both load, merge_filters of the two either fails with
// kIncompatibleFilters (exactly when a field section 8 names differs) or
// kCapacityExceeded (exactly when compatible and the inserted counts sum past
// expectedItemCount), or yields the OR of the payloads with every field
// right, and a snapshot of it that loads back.
std::string check_merge(std::span<const std::uint8_t> data);

// `abf serve`'s request parsing: defined in fuzz/serve_request_fuzz.cc (its
// comment gives the input and the properties), not in checks.cc, so that
// this library needs no server code; linked into the fuzz_serve_request
// target and the replay test wherever abf_server_request is built.
std::string check_serve_request(std::span<const std::uint8_t> data);

struct Target {
  std::string_view name;  // fuzz/corpus/<name>, the executable fuzz_<name>
  std::string (*check)(std::span<const std::uint8_t> data);
};
// The five targets of checks.cc (check_serve_request is not among them).
std::span<const Target> targets();

}  // namespace abf::fuzz
