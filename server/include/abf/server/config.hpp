// The configuration of `abf serve` (docs/serve.md): tenants, listeners,
// tokens, limits. Parsed from a JSON file (nlohmann-json) or built from the
// command line's one-tenant flags; pure functions of text, like request.hpp,
// except read_token_file, which checks the file's mode.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "abf/error.hpp"

namespace abf::server {

// One tenant: its own catalog, snapshot and optional key (docs/protocol.md
// section 10), and optionally an exact index of the catalog (ABFX, or an ABXS index set; `abf
// index`) that answers the filter's maybes in memory. Requests name it in
// the path (/v1/<name>/...) or as gRPC instance_name.
struct TenantConfig {
  std::string name;
  std::filesystem::path snapshot;  // re-read on reload
  std::filesystem::path db;        // the SqliteCatalog, opened read-only
  std::optional<std::filesystem::path> key_file;
  // Checked against the catalog (check_index_binding) at start, where a
  // refusal stops the server, and re-read and checked at every reload
  // (SIGHUP, POST /admin/reload), where a refusal keeps the old one.
  std::optional<std::filesystem::path> index;
};

// Per-token limits (token buckets); 0 is no limit. A bucket holds
// `burst_seconds` of its rate. A request costs one request token and one
// digest token per digest; the digest bucket may go into debt by one
// request, so a batch larger than the bucket passes once and the next waits.
struct RateLimit {
  double requests_per_second = 0;
  double digests_per_second = 0;
  double burst_seconds = 1;
};

// Answering at each tenant's catalog head (docs/serve.md, "Snapshots older
// than the catalog"): the config file's "head" object.
struct HeadConfig {
  // The most digests added after a snapshot's version held in memory per
  // tenant (32 bytes each; ServiceOptions::head_cache_digests). Beyond it
  // every filter `absent` is a catalog lookup until the snapshot is rebuilt.
  std::uint64_t cache_digests = std::uint64_t{1} << 21;
  // `abf serve --follow`: rebuild and publish a tenant's snapshot in the
  // background once it lags its catalog by follow_lag_versions versions or
  // follow_lag_digests added digests (checked every follow_poll_ms). The
  // server then writes the tenant's snapshot file (atomically).
  bool follow = false;
  std::uint64_t follow_lag_versions = 8;
  std::uint64_t follow_lag_digests = 100000;
  unsigned follow_poll_ms = 1000;
};

struct ServerConfig {
  std::string http_listen = "127.0.0.1:8080";  // HOST:PORT; port 0: the OS picks
  std::string grpc_listen;                     // HOST:PORT; empty: no gRPC
  std::vector<TenantConfig> tenants;
  // Bearer tokens (read_token_file); none: no authentication at all.
  std::optional<std::filesystem::path> token_file;
  // TLS for both fronts, PEM files; both or neither.
  std::optional<std::filesystem::path> tls_cert;
  std::optional<std::filesystem::path> tls_key;
  RateLimit rate_limit;
  std::size_t max_body_bytes = 32u << 20;  // 413 beyond
  std::size_t max_digests = 1u << 18;      // per request, 413 beyond
  std::size_t max_header_bytes = 8192;     // all header lines together, 431 beyond
  unsigned idle_timeout_seconds = 30;      // a keep-alive connection with no request
  unsigned request_timeout_seconds = 10;   // to read a request, or write an answer
  // Open HTTP connections, all clients together and from one address;
  // beyond them a new connection gets 503 and is closed.
  std::size_t max_connections = 1024;
  std::size_t max_connections_per_client = 128;
  unsigned http_threads = 64;            // HTTP threads kept for new connections
  unsigned shutdown_grace_seconds = 30;  // SIGTERM: in-flight requests finish
  std::string log_level = "info";        // debug, info, warn, error
  std::string backend = "auto";          // the filter engine (abf::Backend name)
  // The counters that follow filter answers (query, negative, maybe,
  // false_positive, exact_lookup, filter_bypass, their ratios) and the
  // latency histograms reach /metrics only as a release: at most one every
  // `metrics_release_seconds`, and a tenant's counters only once at least
  // `metrics_release_min_missing` digests were answered missing since its
  // last release. So a release sums the filter answers of at least that
  // many missing digests, and no reader can tell one request's answer
  // (docs/protocol.md section 10; docs/serve.md, "Private operations").
  unsigned metrics_release_seconds = 60;
  std::uint64_t metrics_release_min_missing = 1000;
  HeadConfig head;
};

// Parses a configuration file's text. `source` names it in errors; relative
// paths in it are taken from `base_dir` (the file's folder). Unknown keys are
// refused (a misspelt limit must not silently fall back to its default).
// kInvalidArgument "<source>: <key>: ..." for every mistake, validate()
// included.
Result<ServerConfig> parse_server_config(std::string_view text, std::string_view source,
                                         const std::filesystem::path& base_dir);

// Checks a configuration however it was made: at least one tenant, unique
// valid names, HOST:PORT listeners, both TLS files or neither, limits > 0,
// a known log level. kInvalidArgument naming the field.
Result<void> validate(const ServerConfig& config);

// HOST:PORT split; the host may be a [bracketed] IPv6 address. Port 0..65535.
struct ListenAddress {
  std::string host;
  int port = 0;
};
Result<ListenAddress> parse_listen_address(std::string_view text);

// One line of a token file: the token's SHA-256 (the token itself is not
// kept), the tenants it may ask, and which operations it may use.
struct TokenEntry {
  std::array<std::uint8_t, 32> hash{};
  std::vector<std::string> tenants;  // "*" is every tenant
  bool admin = false;                // @admin: POST /admin/*, and all @metrics may
  bool metrics = false;              // @metrics: GET /metrics and /readyz's details
  std::string id;                    // "t1a2b3c4": names the token in logs, never reveals it
  std::uint64_t line = 0;            // where it was in the file
};

// A token file's text. One token a line, '#' comments and blank lines
// skipped:
//   <token> <scope>[,<scope>...]
// where a scope is a tenant name, "*" (every tenant), "@metrics" (may read
// /metrics and /readyz's per-tenant details) or "@admin" (the operator: may
// POST /admin/reload, and read what @metrics may). A token is 16 to 512 printable ASCII characters
// without spaces. kInvalidArgument "<source>: line N: ..." (never quoting the token); a token given
// twice is refused.
Result<std::vector<TokenEntry>> parse_token_file(std::string_view text, std::string_view source);

// Refuses (kInvalidArgument, naming the file, `what` and its mode; a key
// file's own error, kInvalidKey, is read_key_file's) a secret file
// that is not a regular file or that its group or others may read or write,
// as ssh does its private keys; kIo when it cannot be inspected. For token
// files, key files and the TLS private key.
Result<void> check_private_file(const std::filesystem::path& path, std::string_view what);

// Reads and parses a token file, refused (kInvalidArgument) when it is not a
// regular file or when its group or others may read it (like key files).
Result<std::vector<TokenEntry>> read_token_file(const std::filesystem::path& path);

// Finds the entry whose token is `token`, comparing SHA-256 hashes with
// CRYPTO_memcmp against every entry (no early exit, and the compared
// length is always 32): the time taken does not depend on which entry, if
// any, matches, nor on how much of a token is right.
const TokenEntry* find_token(std::span<const TokenEntry> entries, std::string_view token) noexcept;

// Whether `entry` may read /metrics and /readyz's details (@metrics or @admin).
bool token_may_read_operations(const TokenEntry& entry) noexcept;

// Whether `entry` may ask about `tenant`.
bool token_allows(const TokenEntry& entry, std::string_view tenant) noexcept;

}  // namespace abf::server
