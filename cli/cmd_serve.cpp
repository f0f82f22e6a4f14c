// abf serve: the existence service on the network (docs/serve.md). HTTP/1.1
// and gRPC in front of each tenant's snapshot and catalog; every answer
// exact. Built when the server's packages are present (server/CMakeLists.txt).
#include <malloc.h>
#include <signal.h>

#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>

#include "command.hpp"
#include "common.hpp"
#ifdef ABF_WITH_SERVER
#include "abf/server/config.hpp"
#include "abf/server/server.hpp"
#endif

namespace abf::cli {
namespace {

struct ServeOptions {
  std::string config;
  std::string snapshot;
  std::string db;
  std::string index;
  std::string key_file;
  std::string token_file;
  std::string tenant = "default";
  std::string listen = "127.0.0.1:8080";
  bool listen_given = false;  // --listen on the command line (it overrides --config's)
  std::string grpc_listen;
  std::string tls_cert;
  std::string tls_key;
  std::string log_level;
  std::string backend;
  double rate_rps = 0;
  double rate_dps = 0;
  std::size_t max_body_bytes = 0;
  std::size_t max_digests = 0;
  unsigned idle_timeout = 0;
  unsigned http_threads = 0;
  std::optional<std::uint64_t> head_cache_digests;
  bool follow = false;
  std::optional<std::uint64_t> follow_lag_versions;
  std::optional<std::uint64_t> follow_lag_digests;
};

#ifdef ABF_WITH_SERVER

Result<server::ServerConfig> make_config(const ServeOptions& options) {
  server::ServerConfig config;
  if (!options.config.empty()) {
    std::ifstream in(options.config, std::ios::binary);
    if (!in) return fail(ErrorCode::kIo, options.config + ": cannot open the configuration");
    std::ostringstream text;
    text << in.rdbuf();
    auto parsed = server::parse_server_config(text.str(), options.config,
                                              std::filesystem::path(options.config).parent_path());
    if (!parsed) return parsed;
    config = std::move(*parsed);
  } else {
    server::TenantConfig tenant;
    tenant.name = options.tenant;
    tenant.snapshot = options.snapshot;
    tenant.db = options.db;
    if (!options.key_file.empty()) tenant.key_file = options.key_file;
    if (!options.index.empty()) tenant.index = options.index;
    config.tenants.push_back(std::move(tenant));
    if (!options.token_file.empty()) config.token_file = options.token_file;
  }
  // Flags given next to --config override it.
  if (!options.config.empty() && !options.token_file.empty()) {
    config.token_file = options.token_file;
  }
  if (options.listen_given || options.config.empty()) config.http_listen = options.listen;
  if (!options.grpc_listen.empty()) config.grpc_listen = options.grpc_listen;
  if (!options.tls_cert.empty()) config.tls_cert = options.tls_cert;
  if (!options.tls_key.empty()) config.tls_key = options.tls_key;
  if (!options.log_level.empty()) config.log_level = options.log_level;
  if (!options.backend.empty()) config.backend = options.backend;
  if (options.rate_rps > 0) config.rate_limit.requests_per_second = options.rate_rps;
  if (options.rate_dps > 0) config.rate_limit.digests_per_second = options.rate_dps;
  if (options.max_body_bytes > 0) config.max_body_bytes = options.max_body_bytes;
  if (options.max_digests > 0) config.max_digests = options.max_digests;
  if (options.idle_timeout > 0) config.idle_timeout_seconds = options.idle_timeout;
  if (options.http_threads > 0) config.http_threads = options.http_threads;
  if (options.head_cache_digests) config.head.cache_digests = *options.head_cache_digests;
  if (options.follow) config.head.follow = true;
  if (options.follow_lag_versions) config.head.follow_lag_versions = *options.follow_lag_versions;
  if (options.follow_lag_digests) config.head.follow_lag_digests = *options.follow_lag_digests;
  if (auto ok = server::validate(config); !ok) return std::unexpected(ok.error());
  return config;
}

// With --follow the server writes each tenant's snapshot (and, replacing a
// set, removes its old shards): none may be another file the server reads
// or holds, another tenant's snapshot included. Files are named by their
// flags in the one-tenant form, by their keys under --config.
std::optional<std::string> follow_overwrites_input(const ServeOptions& options,
                                                   const server::ServerConfig& config) {
  const bool flags = options.config.empty();
  const auto key = [&](const server::TenantConfig& tenant, std::string_view name,
                       std::string_view flag) {
    return flags ? std::string(flag) : "tenant \"" + tenant.name + "\" " + std::string(name);
  };
  const auto top = [&](const std::string& given, std::string_view name, std::string_view flag) {
    return flags || !given.empty() ? std::string(flag) : std::string(name);
  };
  for (std::size_t t = 0; t < config.tenants.size(); ++t) {
    CommandFiles inputs;
    inputs.add_file("--config", options.config);
    if (config.token_file) {
      inputs.add_file(top(options.token_file, "token_file", "--token-file"),
                      config.token_file->string());
    }
    if (config.tls_cert) {
      inputs.add_file(top(options.tls_cert, "tls_cert", "--tls-cert"), config.tls_cert->string());
    }
    if (config.tls_key) {
      inputs.add_file(top(options.tls_key, "tls_key", "--tls-key"), config.tls_key->string());
    }
    for (std::size_t u = 0; u < config.tenants.size(); ++u) {
      const server::TenantConfig& tenant = config.tenants[u];
      if (u != t) {
        inputs.add_filter_set(key(tenant, "snapshot", "--snapshot"), tenant.snapshot.string());
      }
      inputs.add_catalog(key(tenant, "db", "--db"), tenant.db.string());
      if (tenant.key_file) {
        inputs.add_file(key(tenant, "key_file", "--key-file"), tenant.key_file->string());
      }
      if (tenant.index) {
        inputs.add_index_set(key(tenant, "index", "--index"), tenant.index->string());
      }
    }
    const server::TenantConfig& tenant = config.tenants[t];
    CommandFiles outputs;
    outputs.add_filter_set(key(tenant, "snapshot", "--snapshot"), tenant.snapshot.string(),
                           /*written=*/true);
    if (auto clash = inputs.overwritten_input(outputs)) {
      return "--follow rewrites each tenant's snapshot, and " + *clash;
    }
  }
  return std::nullopt;
}

int run_serve(const ServeOptions& options) {
  if (options.config.empty() && (options.snapshot.empty() || options.db.empty())) {
    return usage_error("serve", "give --config FILE, or --snapshot and --db for one tenant");
  }
  if (!options.config.empty() &&
      (!options.snapshot.empty() || !options.db.empty() || !options.key_file.empty() ||
       !options.index.empty() || options.tenant != "default")) {
    return usage_error("serve",
                       "--config names the tenants; --snapshot, --db, --index, --key-file and "
                       "--tenant are for the one-tenant form without it (a tenant's \"index\" "
                       "key in the file)");
  }
  if (options.tls_cert.empty() != options.tls_key.empty()) {
    return usage_error("serve", "--tls-cert and --tls-key go together");
  }
  auto config = make_config(options);
  if (!config) return report("serve", config.error());
  if (config->head.follow) {
    if (auto clash = follow_overwrites_input(options, *config)) return usage_error("serve", *clash);
  }

  // SIGHUP (reload), SIGTERM and SIGINT (graceful stop) are taken by
  // sigwait below: blocked here, before any thread starts, so that every
  // thread inherits the mask and none of them is interrupted.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGHUP);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  // A client that goes away mid-answer must not kill the server.
  ::signal(SIGPIPE, SIG_IGN);
  // A 64 Ki-digest batch is 2 MiB in and 2 MiB out, held in a few buffers
  // of that size per request. glibc serves each from mmap and unmaps it on
  // free, so every request faulted its buffers in afresh (perf: a quarter of
  // the samples in page faults and unmapping; 5.0 M digests/s). Fixed
  // thresholds keep buffers up to 16 MiB in the heap for reuse (12 M/s), and
  // a heap returns memory beyond 32 MiB free at its top to the system.
  // At most 4 arenas: each keeps up to the trim threshold of freed buffers,
  // and the HTTP pool's workers would otherwise get 16 of them (8 a core),
  // 208 MB of RSS after a few seconds of batches.
  ::mallopt(M_MMAP_THRESHOLD, 16 << 20);
  ::mallopt(M_TRIM_THRESHOLD, 32 << 20);
  ::mallopt(M_ARENA_MAX, 4);

  auto server = server::Server::start(*config);
  if (!server) return report("serve", server.error());
  // The ready line, on standard output: what a supervisor or a test waits
  // for, with the ports the OS chose for :0.
  nlohmann::ordered_json ready = {{"event", "ready"},
                                  {"http", (*server)->http_address()},
                                  {"grpc", (*server)->grpc_address()},
                                  {"tenants_ready", (*server)->ready()}};
  if (auto wrote = write_stdout(ready.dump() + "\n"); !wrote) {
    (*server)->shutdown();
    (*server)->wait();
    return report("serve", wrote.error());
  }
  for (;;) {
    int signal_number = 0;
    if (sigwait(&signals, &signal_number) != 0) continue;
    if (signal_number == SIGHUP) {
      (*server)->reload("sighup");
      continue;
    }
    break;  // SIGTERM or SIGINT
  }
  (*server)->shutdown();
  (*server)->wait();
  return kExitOk;
}

#else

int run_serve(const ServeOptions&) {
  return report("serve", Error{ErrorCode::kBackendUnavailable,
                               "this abf was built without the server (cpp-httplib, gRPC and "
                               "protobuf were missing at configure time; scripts/setup installs "
                               "them)"});
}

#endif

Command add_serve_command(CLI::App& root) {
  auto options = std::make_shared<ServeOptions>();
  CLI::App* app = root.add_subcommand(
      "serve", "Serve \"which of these digests are missing?\" over HTTP and gRPC (exact answers)");
  app->footer(
      "One tenant from flags, or several from a JSON config (docs/serve.md has a complete one).\n"
      "HTTP/1.1:\n"
      "  POST /v1/<tenant>/find-missing   body application/octet-stream (32-byte records),\n"
      "                                   text/plain (digest lines) or application/json\n"
      "                                   {\"digests\": [\"sha256:<hex>\", ...]}; answers the\n"
      "                                   missing ones in the same encoding, in input order\n"
      "  HEAD|GET /v1/<tenant>/blobs/sha256:<hex>   200 present, 404 missing, 400 malformed\n"
      "  GET /healthz /readyz             GET /metrics, /readyz's details (a @metrics or @admin\n"
      "                                   token)   POST /admin/reload (an @admin token)\n"
      "gRPC (--grpc-listen): build.bazel.remote.execution.v2.ContentAddressableStorage/\n"
      "FindMissingBlobs, instance_name = tenant.\n"
      "Every answer is exact at the catalog's newest version, read once per request (header\n"
      "X-Abf-Catalog-Version, gRPC trailer x-abf-catalog-version): the filter proves absence,\n"
      "the catalog answers every maybe and every absent the catalog may have added after the\n"
      "snapshot's version. --follow rebuilds a lagging snapshot in the background. SIGHUP or POST "
      "/admin/reload re-read each snapshot (a bad one is refused,\n"
      "counted, and the old one keeps serving); SIGTERM stops gracefully.\n"
      "--index (abf index) answers the filter's maybes from an exact index in memory instead\n"
      "of SQLite, same answers: checked against the catalog at start (a mismatch exits 1) and\n"
      "re-read and checked at every reload (a mismatch keeps the old one, reload answers 500).\n"
      "Prints one JSON ready line on stdout ({\"event\":\"ready\",\"http\":\"HOST:PORT\",...});\n"
      "logs (one JSON object a line, an access line per request, digests never at info) on\n"
      "stderr.\n"
      "Examples:\n"
      "  abf serve --snapshot c.abf --db catalog.db --listen 127.0.0.1:8080\n"
      "  abf serve --snapshot c.abf --db catalog.db --token-file tokens --listen 0.0.0.0:8443 \\\n"
      "            --tls-cert cert.pem --tls-key key.pem --grpc-listen 0.0.0.0:9443\n"
      "  abf serve --config /etc/abf/serve.json");
  app->add_option("--config,-c", options->config, "JSON configuration file (docs/serve.md)")
      ->check(not_a_stream("a configuration file"));
  app->add_option("--snapshot,-s", options->snapshot,
                  "One tenant: its snapshot (abf build --from-catalog), re-read on reload")
      ->check(not_a_stream("a snapshot the server re-reads on reload"));
  app->add_option("--db", options->db, "One tenant: its catalog database (opened read-only)")
      ->check(not_a_stream("a catalog database, which SQLite opens by name"));
  app->add_option("--index", options->index,
                  "One tenant: an exact index of its catalog (abf index) answering the filter's\n"
                  "maybes in memory; re-read on reload")
      ->check(not_a_stream("an index file the server re-reads on reload"));
  add_key_file_option(*app, options->key_file, "open the tenant's keyed (protocol 2) snapshot");
  app->add_option("--tenant", options->tenant, "One tenant: its name in paths (default default)");
  app->add_option("--token-file", options->token_file,
                  "Bearer tokens, mode 0600: lines \"<token> <scope>[,<scope>...]\", a scope a\n"
                  "tenant, * (every one), @metrics (read /metrics) or @admin (also reload);\n"
                  "without it, no authentication")
      ->check(not_a_stream("a token file, whose mode is checked before it is read"));
  // HOST:PORT checked as the command line is read: a port past 65535 is a
  // usage error (exit 2), as every other out-of-range value (a 0 for the
  // limits below too: the configuration file refuses it, and the flags
  // once kept the default for it silently).
  const CLI::Validator listen_address(
      [](const std::string& text) -> std::string {
        auto address = server::parse_listen_address(text);
        return address ? std::string() : address.error().message;
      },
      "HOST:PORT");
  app->add_option("--listen", options->listen,
                  "HTTP HOST:PORT (default 127.0.0.1:8080; port 0: the OS picks)")
      ->check(listen_address);
  app->add_option("--grpc-listen", options->grpc_listen, "gRPC HOST:PORT (default: no gRPC)")
      ->check(listen_address);
  app->add_option("--tls-cert", options->tls_cert, "TLS certificate (PEM), for both fronts");
  app->add_option("--tls-key", options->tls_key, "TLS private key (PEM)");
  app->add_option("--rate-limit-rps", options->rate_rps, "Requests per second per token (0: none)")
      ->check(real_validator(0, 1e15, "requests per second per token; 0: no limit"));
  app->add_option("--rate-limit-dps", options->rate_dps, "Digests per second per token (0: none)")
      ->check(real_validator(0, 1e15, "digests per second per token; 0: no limit"));
  app->add_option("--max-body-bytes", options->max_body_bytes,
                  "Largest request body (default 33554432; 413 beyond)")
      ->transform(count_validator(1));
  app->add_option("--max-digests", options->max_digests,
                  "Most digests per request (default 262144; 413 beyond)")
      ->transform(count_validator(1));
  app->add_option("--idle-timeout", options->idle_timeout,
                  "Seconds a keep-alive connection may idle (default 30)")
      ->transform(count_validator(1, std::numeric_limits<unsigned>::max()));
  app->add_option(
         "--http-threads", options->http_threads,
         "HTTP threads kept for new connections (default 64; each open connection has one)")
      ->transform(count_validator(1, std::numeric_limits<unsigned>::max()));
  app->add_option("--log-level", options->log_level, "debug, info (default), warn or error")
      ->check(CLI::IsMember({"debug", "info", "warn", "error"}));
  add_backend_option(*app, options->backend, "Filter engine");
  app->add_option("--head-cache-digests", options->head_cache_digests,
                  "Most digests added after a snapshot's version held in memory per tenant\n"
                  "(32 bytes each; default 2097152); beyond it every filter absent is a\n"
                  "catalog lookup")
      ->transform(count_validator(0));
  app->add_flag("--follow", options->follow,
                "Rebuild and publish each tenant's snapshot in the background once it lags its\n"
                "catalog (the server then writes the snapshot file, atomically)");
  app->add_option("--follow-lag-versions", options->follow_lag_versions,
                  "With --follow: rebuild at this many versions behind (default 8)")
      ->transform(count_validator(1));
  app->add_option("--follow-lag-digests", options->follow_lag_digests,
                  "With --follow: rebuild at this many digests added since (default 100000)")
      ->transform(count_validator(1));
  return {app, [options, app] {
            options->listen_given = app->count("--listen") > 0;
            return run_serve(*options);
          }};
}

}  // namespace

ABF_REGISTER_COMMAND(68, add_serve_command);

}  // namespace abf::cli
