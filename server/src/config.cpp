// The configuration of `abf serve` (config.hpp).
#include "abf/server/config.hpp"

#include <openssl/crypto.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "abf/backend.hpp"
#include "abf/digest.hpp"
#include "abf/server/request.hpp"

namespace abf::server {

namespace {

using nlohmann::json;

std::unexpected<Error> invalid(std::string message) {
  return fail(ErrorCode::kInvalidArgument, std::move(message));
}

std::filesystem::path resolve(const std::filesystem::path& base, const std::string& path) {
  const std::filesystem::path p(path);
  return p.is_absolute() || base.empty() ? p : base / p;
}

// Reads one field of `object` into `out` when present, checking its type.
template <class T>
Result<void> read_field(const json& object, const char* key, T& out, const std::string& where) {
  if (!object.contains(key)) return {};
  const json& value = object.at(key);
  if constexpr (std::is_same_v<T, std::string>) {
    if (!value.is_string()) return invalid(where + "." + key + ": expected a string");
    out = value.get<std::string>();
  } else if constexpr (std::is_same_v<T, bool>) {
    if (!value.is_boolean()) return invalid(where + "." + key + ": expected true or false");
    out = value.get<bool>();
  } else if constexpr (std::is_same_v<T, double>) {
    if (!value.is_number() || value.get<double>() < 0) {
      return invalid(where + "." + key + ": expected a number >= 0");
    }
    out = value.get<double>();
  } else {
    if (!value.is_number_unsigned()) {
      return invalid(where + "." + key + ": expected a whole number >= 0");
    }
    const std::uint64_t whole = value.get<std::uint64_t>();
    if (whole > static_cast<std::uint64_t>(std::numeric_limits<T>::max())) {
      return invalid(where + "." + key + ": " + std::to_string(whole) + " is too large (at most " +
                     std::to_string(std::numeric_limits<T>::max()) + ")");
    }
    out = static_cast<T>(whole);
  }
  return {};
}

Result<void> only_keys(const json& object, std::initializer_list<std::string_view> keys,
                       const std::string& where) {
  for (const auto& item : object.items()) {
    bool known = false;
    for (std::string_view key : keys) known = known || item.key() == key;
    if (!known) {
      std::string list;
      for (std::string_view key : keys) list += (list.empty() ? "" : ", ") + std::string(key);
      return invalid(where + ": unknown key \"" + item.key() + "\" (known: " + list + ")");
    }
  }
  return {};
}

std::string hex_of(const std::uint8_t* bytes, std::size_t count) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < count; ++i) {
    out += kHex[bytes[i] >> 4];
    out += kHex[bytes[i] & 15];
  }
  return out;
}

}  // namespace

Result<ListenAddress> parse_listen_address(std::string_view text) {
  ListenAddress address;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return invalid("listen address \"" + std::string(text) + "\": expected [IPv6]:PORT");
    }
    address.host = std::string(text.substr(1, close - 1));
    port = text.substr(close + 2);
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string_view::npos || colon == 0) {
      return invalid("listen address \"" + std::string(text) + "\": expected HOST:PORT");
    }
    address.host = std::string(text.substr(0, colon));
    port = text.substr(colon + 1);
  }
  if (port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string_view::npos ||
      std::stoi(std::string(port)) > 65535) {
    return invalid("listen address \"" + std::string(text) + "\": port must be 0..65535");
  }
  address.port = std::stoi(std::string(port));
  return address;
}

Result<void> validate(const ServerConfig& config) {
  if (config.tenants.empty()) return invalid("tenants: at least one tenant is needed");
  std::set<std::string> names;
  for (std::size_t i = 0; i < config.tenants.size(); ++i) {
    const TenantConfig& tenant = config.tenants[i];
    const std::string where = "tenants[" + std::to_string(i) + "]";
    if (!valid_tenant_name(tenant.name)) {
      return invalid(where + ".name \"" + tenant.name +
                     "\": expected 1 to 64 of A-Z a-z 0-9 . _ - (not starting with .)");
    }
    if (!names.insert(tenant.name).second) {
      return invalid(where + ".name \"" + tenant.name + "\": given twice");
    }
    if (tenant.snapshot.empty()) return invalid(where + ".snapshot: required");
    if (tenant.db.empty()) return invalid(where + ".db: required");
    if (tenant.index && tenant.index->empty()) return invalid(where + ".index: empty path");
  }
  if (auto http = parse_listen_address(config.http_listen); !http) {
    return invalid("listen: " + http.error().message);
  }
  if (!config.grpc_listen.empty()) {
    if (auto grpc = parse_listen_address(config.grpc_listen); !grpc) {
      return invalid("grpc_listen: " + grpc.error().message);
    }
  }
  if (config.tls_cert.has_value() != config.tls_key.has_value()) {
    return invalid("tls: give both tls_cert and tls_key, or neither");
  }
  const auto positive = [](std::uint64_t value, const char* name) -> Result<void> {
    if (value == 0) return invalid(std::string(name) + ": must be at least 1");
    return {};
  };
  for (auto check :
       {positive(config.max_body_bytes, "limits.max_body_bytes"),
        positive(config.max_digests, "limits.max_digests_per_request"),
        positive(config.max_header_bytes, "limits.max_header_bytes"),
        positive(config.idle_timeout_seconds, "limits.idle_timeout_seconds"),
        positive(config.request_timeout_seconds, "limits.request_timeout_seconds"),
        positive(config.http_threads, "http_threads"),
        positive(config.max_connections, "limits.max_connections"),
        positive(config.max_connections_per_client, "limits.max_connections_per_client")}) {
    if (!check) return check;
  }
  for (auto check :
       {positive(config.metrics_release_seconds, "metrics_release.interval_seconds"),
        positive(config.metrics_release_min_missing, "metrics_release.min_missing_digests")}) {
    if (!check) return check;
  }
  if (config.rate_limit.burst_seconds <= 0) {
    return invalid("rate_limit.burst_seconds: must be > 0");
  }
  if (config.log_level != "debug" && config.log_level != "info" && config.log_level != "warn" &&
      config.log_level != "error") {
    return invalid("log_level \"" + config.log_level + "\": expected debug, info, warn or error");
  }
  if (!Backend::parse(config.backend)) {
    return invalid("backend \"" + config.backend + "\": not an engine this build knows");
  }
  return {};
}

Result<ServerConfig> parse_server_config(std::string_view text, std::string_view source,
                                         const std::filesystem::path& base_dir) {
  const std::string where(source);
  json root;
  // A key given twice in one object is refused, not taken last-wins (two
  // "listen" keys would silently drop one): the first one found is named,
  // with the key of the object it is in.
  std::vector<std::set<std::string>> keys;  // an object's keys, for each open object
  std::vector<std::string> objects;         // the key each open object is the value of
  std::string last_key;
  std::optional<std::string> repeated;
  const json::parser_callback_t check_keys = [&](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) {
      keys.emplace_back();
      objects.push_back(last_key);
    } else if (event == json::parse_event_t::object_end && !keys.empty()) {
      last_key = objects.back();
      keys.pop_back();
      objects.pop_back();
    } else if (event == json::parse_event_t::key && !keys.empty()) {
      last_key = parsed.get<std::string>();
      if (!keys.back().insert(last_key).second && !repeated) {
        repeated = "key \"" + last_key + "\" given twice" +
                   (objects.back().empty() ? std::string() : " in \"" + objects.back() + "\"");
      }
    }
    return true;
  };
  try {
    root = json::parse(text, check_keys);
  } catch (const json::parse_error& error) {
    return invalid(where + ": not JSON at byte " + std::to_string(error.byte));
  } catch (const json::out_of_range&) {
    // A number past a double's range (1e400).
    return invalid(where + ": a number is out of range");
  }
  if (repeated) return invalid(where + ": " + *repeated);
  if (!root.is_object()) return invalid(where + ": expected a JSON object");
  if (auto ok = only_keys(root,
                          {"listen", "grpc_listen", "tenants", "token_file", "tls_cert", "tls_key",
                           "limits", "rate_limit", "http_threads", "log_level", "backend",
                           "shutdown_grace_seconds", "metrics_release", "head"},
                          where);
      !ok) {
    return std::unexpected(ok.error());
  }
  ServerConfig config;
  const auto field = [&](const json& object, const char* key, auto& out,
                         const std::string& at) -> Result<void> {
    return read_field(object, key, out, at);
  };
  std::string token_file, tls_cert, tls_key;
  for (auto ok : {field(root, "listen", config.http_listen, where),
                  field(root, "grpc_listen", config.grpc_listen, where),
                  field(root, "token_file", token_file, where),
                  field(root, "tls_cert", tls_cert, where), field(root, "tls_key", tls_key, where),
                  field(root, "http_threads", config.http_threads, where),
                  field(root, "log_level", config.log_level, where),
                  field(root, "backend", config.backend, where),
                  field(root, "shutdown_grace_seconds", config.shutdown_grace_seconds, where)}) {
    if (!ok) return std::unexpected(ok.error());
  }
  if (!token_file.empty()) config.token_file = resolve(base_dir, token_file);
  if (!tls_cert.empty()) config.tls_cert = resolve(base_dir, tls_cert);
  if (!tls_key.empty()) config.tls_key = resolve(base_dir, tls_key);

  if (root.contains("limits")) {
    const json& limits = root["limits"];
    const std::string at = where + ": limits";
    if (!limits.is_object()) return invalid(at + ": expected an object");
    if (auto ok = only_keys(limits,
                            {"max_body_bytes", "max_digests_per_request", "max_header_bytes",
                             "idle_timeout_seconds", "request_timeout_seconds", "max_connections",
                             "max_connections_per_client"},
                            at);
        !ok) {
      return std::unexpected(ok.error());
    }
    for (auto ok :
         {field(limits, "max_body_bytes", config.max_body_bytes, at),
          field(limits, "max_digests_per_request", config.max_digests, at),
          field(limits, "max_header_bytes", config.max_header_bytes, at),
          field(limits, "idle_timeout_seconds", config.idle_timeout_seconds, at),
          field(limits, "request_timeout_seconds", config.request_timeout_seconds, at),
          field(limits, "max_connections", config.max_connections, at),
          field(limits, "max_connections_per_client", config.max_connections_per_client, at)}) {
      if (!ok) return std::unexpected(ok.error());
    }
  }
  if (root.contains("head")) {
    const json& head = root["head"];
    const std::string at = where + ": head";
    if (!head.is_object()) return invalid(at + ": expected an object");
    if (auto ok = only_keys(head,
                            {"cache_digests", "follow", "follow_lag_versions",
                             "follow_lag_digests", "follow_poll_ms"},
                            at);
        !ok) {
      return std::unexpected(ok.error());
    }
    for (auto ok : {field(head, "cache_digests", config.head.cache_digests, at),
                    field(head, "follow", config.head.follow, at),
                    field(head, "follow_lag_versions", config.head.follow_lag_versions, at),
                    field(head, "follow_lag_digests", config.head.follow_lag_digests, at),
                    field(head, "follow_poll_ms", config.head.follow_poll_ms, at)}) {
      if (!ok) return std::unexpected(ok.error());
    }
    if (config.head.follow_lag_versions == 0 || config.head.follow_lag_digests == 0 ||
        config.head.follow_poll_ms == 0) {
      return invalid(at + ": follow_lag_versions, follow_lag_digests and follow_poll_ms must be "
                          "at least 1");
    }
  }
  if (root.contains("rate_limit")) {
    const json& rate = root["rate_limit"];
    const std::string at = where + ": rate_limit";
    if (!rate.is_object()) return invalid(at + ": expected an object");
    if (auto ok =
            only_keys(rate, {"requests_per_second", "digests_per_second", "burst_seconds"}, at);
        !ok) {
      return std::unexpected(ok.error());
    }
    for (auto ok : {field(rate, "requests_per_second", config.rate_limit.requests_per_second, at),
                    field(rate, "digests_per_second", config.rate_limit.digests_per_second, at),
                    field(rate, "burst_seconds", config.rate_limit.burst_seconds, at)}) {
      if (!ok) return std::unexpected(ok.error());
    }
  }
  if (root.contains("metrics_release")) {
    const json& release = root["metrics_release"];
    const std::string at = where + ": metrics_release";
    if (!release.is_object()) return invalid(at + ": expected an object");
    if (auto ok = only_keys(release, {"interval_seconds", "min_missing_digests"}, at); !ok) {
      return std::unexpected(ok.error());
    }
    for (auto ok :
         {field(release, "interval_seconds", config.metrics_release_seconds, at),
          field(release, "min_missing_digests", config.metrics_release_min_missing, at)}) {
      if (!ok) return std::unexpected(ok.error());
    }
  }
  if (!root.contains("tenants") || !root["tenants"].is_array()) {
    return invalid(where +
                   ": tenants: expected an array of {name, snapshot, db[, key_file, index]}");
  }
  const json& tenants = root["tenants"];
  for (std::size_t i = 0; i < tenants.size(); ++i) {
    const std::string at = where + ": tenants[" + std::to_string(i) + "]";
    const json& item = tenants[i];
    if (!item.is_object()) return invalid(at + ": expected an object");
    if (auto ok = only_keys(item, {"name", "snapshot", "db", "key_file", "index"}, at); !ok) {
      return std::unexpected(ok.error());
    }
    TenantConfig tenant;
    std::string snapshot, db, key_file, index;
    for (auto ok : {field(item, "name", tenant.name, at), field(item, "snapshot", snapshot, at),
                    field(item, "db", db, at), field(item, "key_file", key_file, at),
                    field(item, "index", index, at)}) {
      if (!ok) return std::unexpected(ok.error());
    }
    if (!snapshot.empty()) tenant.snapshot = resolve(base_dir, snapshot);
    if (!db.empty()) tenant.db = resolve(base_dir, db);
    if (!key_file.empty()) tenant.key_file = resolve(base_dir, key_file);
    if (item.contains("index") && index.empty()) return invalid(at + ".index: empty path");
    if (!index.empty()) tenant.index = resolve(base_dir, index);
    config.tenants.push_back(std::move(tenant));
  }
  if (auto ok = validate(config); !ok) return invalid(where + ": " + ok.error().message);
  return config;
}

Result<std::vector<TokenEntry>> parse_token_file(std::string_view text, std::string_view source) {
  std::vector<TokenEntry> entries;
  std::set<std::array<std::uint8_t, 32>> seen;
  std::uint64_t line_number = 0;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const auto first = line.find_first_not_of(" \t");
    if (first == std::string_view::npos || line[first] == '#') continue;
    line.remove_prefix(first);
    const std::string where = std::string(source) + ": line " + std::to_string(line_number);
    const auto space = line.find_first_of(" \t");
    // A token followed by nothing but blanks has no scope either.
    const auto scopes_start =
        space == std::string_view::npos ? space : line.find_first_not_of(" \t", space);
    if (scopes_start == std::string_view::npos) {
      return invalid(where + ": expected \"<token> <tenant>[,<tenant>...]\"");
    }
    const std::string_view token = line.substr(0, space);
    std::string_view scopes = line.substr(scopes_start);
    while (!scopes.empty() && (scopes.back() == ' ' || scopes.back() == '\t')) {
      scopes.remove_suffix(1);
    }
    if (token.size() < 16 || token.size() > 512) {
      return invalid(where + ": a token must be 16 to 512 characters, this one has " +
                     std::to_string(token.size()));
    }
    for (char c : token) {
      if (c < 0x21 || c > 0x7e) {
        return invalid(where + ": a token must be printable ASCII without spaces");
      }
    }
    TokenEntry entry;
    entry.line = line_number;
    const Digest hash =
        sha256(std::span(reinterpret_cast<const std::uint8_t*>(token.data()), token.size()));
    std::memcpy(entry.hash.data(), hash.bytes.data(), entry.hash.size());
    entry.id = "t" + hex_of(entry.hash.data(), 4);
    if (!seen.insert(entry.hash).second) return invalid(where + ": this token is given twice");
    std::size_t pos = 0;
    while (pos <= scopes.size()) {
      std::size_t comma = scopes.find(',', pos);
      if (comma == std::string_view::npos) comma = scopes.size();
      const std::string_view scope = scopes.substr(pos, comma - pos);
      pos = comma + 1;
      if (scope == "@admin") {
        entry.admin = true;
      } else if (scope == "@metrics") {
        entry.metrics = true;
      } else if (scope == "*" || valid_tenant_name(scope)) {
        entry.tenants.emplace_back(scope);
      } else {
        return invalid(where + ": scope \"" + std::string(scope) +
                       "\" is not a tenant name, *, @metrics or @admin");
      }
    }
    entries.push_back(std::move(entry));
  }
  return entries;
}

Result<void> check_private_file(const std::filesystem::path& path, std::string_view what) {
  const std::string where = path.string();
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    return fail(ErrorCode::kIo,
                where + ": cannot stat the " + std::string(what) + ": " + std::strerror(errno));
  }
  if (!S_ISREG(info.st_mode)) {
    return fail(ErrorCode::kInvalidArgument,
                where + ": a " + std::string(what) + " must be a regular file");
  }
  if ((info.st_mode & (S_IRGRP | S_IROTH | S_IWGRP | S_IWOTH)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%03o", static_cast<unsigned>(info.st_mode & 0777));
    return fail(ErrorCode::kInvalidArgument, where + ": the " + std::string(what) +
                                            " may be read or written by its group or others "
                                            "(mode " +
                                            mode + "); chmod 600 it");
  }
  return {};
}

Result<std::vector<TokenEntry>> read_token_file(const std::filesystem::path& path) {
  const std::string where = path.string();
  if (auto ok = check_private_file(path, "token file"); !ok) return std::unexpected(ok.error());
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return fail(ErrorCode::kIo, where + ": cannot open the token file: " + std::strerror(errno));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return fail(ErrorCode::kIo, where + ": read error");
  auto entries = parse_token_file(text.str(), where);
  // An empty file would make every request 401, silently.
  if (entries && entries->empty()) {
    return invalid(where +
                   ": the token file has no tokens (every request would be refused 401); "
                   "add a line `<token> <scope>`");
  }
  return entries;
}

const TokenEntry* find_token(std::span<const TokenEntry> entries, std::string_view token) noexcept {
  const Digest hash =
      sha256(std::span(reinterpret_cast<const std::uint8_t*>(token.data()), token.size()));
  const TokenEntry* found = nullptr;
  for (const TokenEntry& entry : entries) {
    // Every entry is compared; the branch only picks which to keep.
    const bool equal = CRYPTO_memcmp(entry.hash.data(), hash.bytes.data(), entry.hash.size()) == 0;
    found = equal ? &entry : found;
  }
  return found;
}

bool token_may_read_operations(const TokenEntry& entry) noexcept {
  return entry.admin || entry.metrics;
}

bool token_allows(const TokenEntry& entry, std::string_view tenant) noexcept {
  for (const std::string& allowed : entry.tenants) {
    if (allowed == "*" || allowed == tenant) return true;
  }
  return false;
}

}  // namespace abf::server
