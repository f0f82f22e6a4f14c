// The text helpers request.cpp and request_body.cpp share (private to
// abf_server_request): case folding, trimming, and the digest of a
// "sha256:<hex>" or bare-hex text with a message that says where.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>

#include "abf/server/request.hpp"

namespace abf::server::detail {

inline constexpr std::string_view kShaPrefix = "sha256:";

inline std::string lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) {
    return static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  });
  return out;
}

inline std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

// A digest text for messages: never the digest itself (digests are not
// logged, and error messages are logged), only its length and shape.
inline std::string describe_digest_text(std::string_view text) {
  return std::to_string(text.size()) + " bytes";
}

inline RequestResult<Digest> parse_prefixed_or_bare(std::string_view text, bool require_prefix,
                                                    const std::string& where) {
  std::string_view hex = text;
  if (hex.size() >= kShaPrefix.size() && lower(hex.substr(0, kShaPrefix.size())) == kShaPrefix) {
    hex.remove_prefix(kShaPrefix.size());
  } else if (require_prefix) {
    const auto colon = text.find(':');
    if (colon != std::string_view::npos && colon < 16) {
      return refuse(400, "invalid_digest",
                    where + ": digest algorithm '" + std::string(text.substr(0, colon)) +
                        "' is not supported: only sha256:<64 hex digits>");
    }
    return refuse(400, "invalid_digest",
                  where + ": expected sha256:<64 hex digits>, got " + describe_digest_text(text));
  }
  auto digest = parse_hex_digest(hex);
  if (!digest) {
    return refuse(400, "invalid_digest",
                  where + ": expected 64 hex digits after sha256:, got " +
                      describe_digest_text(hex) +
                      (hex.size() == 64 ? " with a non-hex digit" : ""));
  }
  return *digest;
}

}  // namespace abf::server::detail
