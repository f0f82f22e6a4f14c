// Writes seed inputs for the fuzz targets (input formats: fuzz/checks.hpp):
//
//   fuzz_seeds OUT_DIR VECTORS_DIR
//
// OUT_DIR/<target>/ gets the golden snapshots of VECTORS_DIR (the project's
// tests/data/vectors) and their digests, plus small snapshots of both format
// versions and both protocols, pairs to merge (compatible, keyed, over
// capacity, incompatible), hand-made digest lines of every accepted form
// and some rejected ones, and requests for abf serve's parsers (routes,
// bodies in each encoding, headers, blob digests, a configuration file, a
// token file). scripts/fuzz runs it before each fuzzing run.
#include <xxhash.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "abf/abf.hpp"

namespace fs = std::filesystem;
using Bytes = std::vector<std::uint8_t>;

namespace {

int written = 0;

void write(const fs::path& dir, const std::string& name, const Bytes& bytes) {
  fs::create_directories(dir);
  std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  ++written;
}

void write(const fs::path& dir, const std::string& name, const std::string& text) {
  write(dir, name, Bytes(text.begin(), text.end()));
}

Bytes read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  return {text.begin(), text.end()};
}

Bytes with_control(std::uint8_t control, const Bytes& bytes) {
  Bytes out{control};
  out.insert(out.end(), bytes.begin(), bytes.end());
  return out;
}

// The same snapshot in formatVersion 1 (protocol 1 only): reserved from 80
// on, and the version-1 header checksum.
Bytes as_version1(Bytes bytes) {
  const std::uint32_t version = 1;
  std::memcpy(bytes.data() + 4, &version, 4);
  std::memset(bytes.data() + 80, 0, 48);
  const std::uint64_t sum = XXH3_64bits(bytes.data(), 72);
  std::memcpy(bytes.data() + 72, &sum, 8);
  return bytes;
}

std::vector<abf::Digest> digests(std::size_t count, std::size_t first) {
  std::vector<abf::Digest> out;
  for (std::size_t i = first; i < first + count; ++i) {
    out.push_back(abf::sha256("member:" + std::to_string(i)));
  }
  return out;
}

Bytes snapshot(std::size_t count, std::size_t first, abf::BloomSpec spec,
               const abf::BuildOptions& options) {
  auto filter = abf::build_filter(digests(count, first), spec, options);
  if (!filter) {
    std::cerr << "fuzz_seeds: " << filter.error().describe() << "\n";
    std::exit(1);
  }
  return abf::serialize_snapshot(*filter);
}

Bytes merge_input(std::uint8_t control, const Bytes& a, const Bytes& b) {
  Bytes out{control, static_cast<std::uint8_t>(a.size()), static_cast<std::uint8_t>(a.size() >> 8)};
  out.insert(out.end(), a.begin(), a.end());
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: fuzz_seeds OUT_DIR VECTORS_DIR\n";
    return 2;
  }
  const fs::path out = argv[1];
  const fs::path vectors = argv[2];
  const auto key = *abf::Key::parse_hex("000102030405060708090a0b0c0d0e0f");
  const auto catalog = *abf::CatalogId::parse_hex("5f0c6e2a9b7d4e11a3c2d8f0e6b4a197");

  // Indexes: the golden ABFX files as they are and resealed, and a few more.
  for (const auto& entry : fs::recursive_directory_iterator(vectors)) {
    if (entry.path().extension() != ".abfx") continue;
    const Bytes bytes = read(entry.path());
    const std::string stem = entry.path().stem().string();
    write(out / "index", "golden-" + stem, with_control(0, bytes));
    write(out / "index", "golden-" + stem + "-resealed", with_control(3, bytes));
  }
  {
    std::vector<abf::Digest> digests(40);
    for (std::size_t i = 0; i < digests.size(); ++i) {
      digests[i].bytes[0] = static_cast<std::uint8_t>(i * 6);
      digests[i].bytes[31] = static_cast<std::uint8_t>(i);
    }
    abf::IndexIdentity identity{catalog, 7, abf::ContentFingerprint::of(digests), 8};
    write(out / "index", "forty-block-8", with_control(0, *abf::serialize_index(identity, digests)));
    identity.block_digests = 1;
    identity.content_fingerprint.reset();
    write(out / "index", "forty-block-1-nofp",
          with_control(3, *abf::serialize_index(identity, digests)));
    write(out / "index", "short", Bytes{3, 'A', 'B', 'F', 'X', 1, 0, 0, 0});
  }

  // Index-set manifests: the golden ones as they are and resealed.
  for (const auto& entry : fs::recursive_directory_iterator(vectors)) {
    if (entry.path().extension() != ".abxs") continue;
    const Bytes bytes = read(entry.path());
    const std::string stem = entry.path().stem().string();
    write(out / "index_set", "golden-" + stem, with_control(0, bytes));
    write(out / "index_set", "golden-" + stem + "-resealed", with_control(3, bytes));
  }

  // Snapshots: the golden files as they are and resealed, and small ones.
  for (const auto& entry : fs::recursive_directory_iterator(vectors)) {
    if (entry.path().extension() != ".abf") continue;
    const Bytes bytes = read(entry.path());
    const std::string stem = entry.path().stem().string();
    write(out / "snapshot", "golden-" + stem, with_control(0, bytes));
    write(out / "snapshot", "golden-" + stem + "-resealed", with_control(3, bytes));
  }
  const abf::BloomSpec tiny{1, 0.5};
  const abf::BloomSpec small{40, 0.01};
  const Bytes unkeyed = snapshot(20, 0, small, {.catalog_version = 7, .catalog_id = catalog});
  const Bytes keyed =
      snapshot(20, 0, small, {.catalog_version = 7, .catalog_id = catalog, .key = key});
  write(out / "snapshot", "small-v2", with_control(0, unkeyed));
  write(out / "snapshot", "small-v2-keyed", with_control(0, keyed));
  write(out / "snapshot", "small-v1", with_control(0, as_version1(snapshot(20, 0, small, {}))));
  write(out / "snapshot", "tiny-v2", with_control(3, snapshot(1, 0, tiny, {})));
  write(out / "snapshot", "empty-v2-keyed", with_control(3, snapshot(0, 0, small, {.key = key})));
  write(out / "snapshot", "short", Bytes{0, 'A', 'B', 'F', '1', 2, 0, 0, 0});

  // Merges: halves of one catalog (unkeyed and keyed), over capacity,
  // different layouts, different catalog versions.
  const Bytes half1 = snapshot(20, 0, small, {.catalog_version = 7, .catalog_id = catalog});
  const Bytes half2 = snapshot(20, 20, small, {.catalog_version = 7, .catalog_id = catalog});
  const Bytes keyed1 = snapshot(20, 0, small, {.catalog_version = 7, .key = key});
  const Bytes keyed2 = snapshot(20, 20, small, {.catalog_version = 7, .key = key});
  const Bytes full = snapshot(40, 0, small, {.catalog_version = 7, .catalog_id = catalog});
  const Bytes other_layout =
      snapshot(20, 0, {40, 0.001}, {.catalog_version = 7, .catalog_id = catalog});
  const Bytes other_version =
      snapshot(20, 20, small, {.catalog_version = 8, .catalog_id = catalog});
  write(out / "merge", "halves", merge_input(0, half1, half2));
  write(out / "merge", "halves-resealed", merge_input(3, half1, half2));
  write(out / "merge", "keyed-halves", merge_input(3 | 4 | 8, keyed1, keyed2));
  write(out / "merge", "over-capacity", merge_input(0, full, half1));
  write(out / "merge", "other-layout", merge_input(0, half1, other_layout));
  write(out / "merge", "other-version", merge_input(0, half1, other_version));
  write(out / "merge", "other-version-named", merge_input(16 | (5 << 5), half1, other_version));
  write(out / "merge", "keyed-with-unkeyed", merge_input(4, keyed1, half2));
  const Bytes golden = read(vectors / "v2" / "member-1000-v2.abf");
  write(out / "merge", "golden-twice", merge_input(0, golden, golden));

  // Text lines: every accepted form, blank lines, and rejected ones.
  const std::string hex = abf::sha256(std::string_view("abc")).hex();
  std::string upper = hex;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  write(out / "text_reader", "bare", hex + "\n");
  write(out / "text_reader", "oci", "sha256:" + hex + "\n");
  write(out / "text_reader", "sha256sum", hex + "  artifact.tar\n" + hex + " *binary.bin\n");
  write(out / "text_reader", "upper-crlf", "sha256:" + upper + "\r\n" + upper + "\r\n");
  write(out / "text_reader", "spaces-blank-lines", "\n  \t\n  " + hex + "\t\n\r\n" + hex);
  write(out / "text_reader", "gnu-escaped", "\\" + hex + "  dir\\\\name\\nwith newline\n");
  write(out / "text_reader", "gnu-tag", "SHA256 (artifact.tar) = " + hex + "\n\\SHA256 (a\\nb)=" + hex + "\n");
  write(out / "text_reader", "bad-length", hex.substr(1) + "\n");
  write(out / "text_reader", "bad-algorithm", "sha512:" + hex + "\n");
  write(out / "text_reader", "bad-one-space-name", hex + " name\n");
  write(out / "text_reader", "bad-late-line", hex + "\n" + hex + "\nnot a digest\n");
  write(out / "text_reader", "empty", std::string());
  write(out / "text_reader", "zero-records",
        hex + "  a\n b" + std::string(1, '\0') + "SHA256 (c\nd) = " + hex + std::string(1, '\0'));
  write(out / "text_reader", "bad-nul-in-line", hex + "  a\n" + hex + "  b" + std::string(1, '\0'));
  write(out / "text_reader", "bad-run-in-record",
        hex + "  a" + std::string(1, '\0') + hex + "  b\n" + hex + "  c\n");
  std::string probes;
  for (const auto& row : {"probes.tsv"}) {
    std::ifstream in(vectors / row);
    std::string line;
    for (int n = 0; std::getline(in, line) && n < 40;) {
      if (line.empty() || line[0] == '#') continue;
      probes += line.substr(0, line.find('\t')) + "\n";
      ++n;
    }
  }
  write(out / "text_reader", "golden-probe-digests", probes);

  // Binary input: whole records in spans of several sizes, and stray bytes.
  Bytes records;
  for (const auto& digest : digests(5, 0)) {
    records.insert(records.end(), digest.bytes.begin(), digest.bytes.end());
  }
  Bytes spans = {3, 0, 1, 6};
  spans.insert(spans.end(), records.begin(), records.end());
  write(out / "binary_reader", "records", with_control(0, records));
  write(out / "binary_reader", "records-spans", spans);
  Bytes stray = spans;
  stray.insert(stray.end(), {1, 2, 3});
  write(out / "binary_reader", "stray-bytes", stray);
  write(out / "binary_reader", "empty", Bytes{0});

  // abf serve's request parsing (fuzz/serve_request_fuzz.cc): a control
  // byte whose value mod 8 picks the parser, then its text.
  const fs::path serve = out / "serve_request";
  const auto request = [&](const std::string& name, std::uint8_t control, const std::string& text) {
    write(serve, name, with_control(control, Bytes(text.begin(), text.end())));
  };
  const std::string hex2 = abf::sha256(std::string_view("def")).hex();
  // 0: routes, every one the server serves and the refusals.
  request("route-find-missing", 0, "POST /v1/team-a/find-missing");
  request("route-blob-get", 0, "GET /v1/team-a/blobs/sha256:" + hex);
  request("route-blob-head", 0, "HEAD /v1/build.cache_2/blobs/sha256:" + upper);
  request("route-metrics", 0, "GET /metrics");
  request("route-healthz", 0, "GET /healthz");
  request("route-readyz", 0, "HEAD /readyz");
  request("route-admin-reload", 0, "POST /admin/reload");
  request("route-wrong-method", 0, "GET /v1/team-a/find-missing");
  request("route-bad-tenant", 0, "POST /v1/.hidden/find-missing");
  request("route-not-found", 0, "GET /v1/team-a/blobs/sha256:" + hex + "/extra");
  // 1-3: find-missing bodies (binary, text, JSON); control / 8 % 4 picks the
  // limit, 64 to 256 digests.
  std::string binary_body;
  for (const auto& digest : digests(3, 0)) {
    binary_body.append(reinterpret_cast<const char*>(digest.bytes.data()), digest.bytes.size());
  }
  request("body-binary", 1, binary_body);
  request("body-binary-empty", 1, "");
  request("body-binary-truncated", 1, binary_body.substr(0, 70));
  std::string over_limit;
  for (int i = 0; i < 65; ++i) over_limit += binary_body.substr(0, 32);
  request("body-binary-over-limit", 1, over_limit);
  request("body-binary-limit-256", 1 + 3 * 8, over_limit);
  request("body-text", 2,
          hex + "\nsha256:" + hex2 + "\r\n\n" + upper + "  artifact.tar\n" + hex + " *bin\n");
  request("body-text-bad-line", 2, hex + "\nnot a digest\n");
  request("body-json", 3,
          "{\"digests\": [\"sha256:" + hex + "\", \"" + hex2 + "\", \"SHA256:" + upper + "\"]}");
  request("body-json-empty", 3, "{\"digests\":[]}");
  request("body-json-not-json", 3, "{\"digests\": [");
  request("body-json-no-array", 3, "{\"digests\": \"sha256:" + hex + "\"}");
  request("body-json-not-string", 3, "{\"digests\": [42, null]}");
  request("body-json-bad-digest", 3, "{\"digests\": [\"sha512:" + hex + "\"]}");
  // 4: a Content-Type, a newline, an Authorization value.
  request("headers-binary-bearer", 4, "application/octet-stream\nBearer s3cr3t-token-0123456789");
  request("headers-text-charset", 4, "text/plain; charset=utf-8\nbearer\t tok");
  request("headers-json", 4, "Application/JSON\n");
  request("headers-no-authorization", 4, "application/json");
  request("headers-other-scheme", 4, "application/json\nBasic dXNlcjpwYXNz");
  request("headers-two-tokens", 4, "text/plain\nBearer one two");
  request("headers-unsupported", 4, "application/x-www-form-urlencoded\nBearer t");
  // 5: a blob path digest, then the same text as a gRPC hash with
  // size_bytes = control - 128.
  request("blob-digest", 5 + 128, "sha256:" + hex);
  request("blob-digest-upper", 5 + 8 * 17, "SHA256:" + upper);
  request("blob-digest-bare", 5 + 128, hex);
  request("blob-digest-negative-size", 5, hex);
  request("blob-digest-other-algorithm", 5 + 128, "sha512:" + hex);
  // 6: a configuration file, every key given.
  request("config-full", 6, R"({
  "listen": "127.0.0.1:8080",
  "grpc_listen": "[::1]:9090",
  "token_file": "tokens",
  "tls_cert": "/etc/abf/cert.pem",
  "tls_key": "key.pem",
  "limits": {"max_body_bytes": 33554432, "max_digests_per_request": 262144,
             "max_header_bytes": 8192, "idle_timeout_seconds": 30,
             "request_timeout_seconds": 10},
  "rate_limit": {"requests_per_second": 100, "digests_per_second": 1e6, "burst_seconds": 2.5},
  "http_threads": 64,
  "log_level": "warn",
  "backend": "scalar",
  "shutdown_grace_seconds": 30,
  "tenants": [
    {"name": "team-a", "snapshot": "a.abf", "db": "a.db"},
    {"name": "team_b.2", "snapshot": "/srv/b.abfs", "db": "/srv/b.db", "key_file": "b.key"}
  ]
})");
  request("config-minimal", 6, R"({"tenants": [{"name": "t", "snapshot": "s.abf", "db": "c.db"}]})");
  request("config-unknown-key", 6, R"({"tenants": [], "limts": {}})");
  request("config-duplicate-tenant", 6,
          R"({"tenants": [{"name": "t", "snapshot": "s", "db": "d"}, {"name": "t", "snapshot": "s", "db": "d"}]})");
  request("config-bad-listen", 6,
          R"({"listen": "[::1]9090", "tenants": [{"name": "t", "snapshot": "s", "db": "d"}]})");
  // 7: a token file.
  request("tokens", 7,
          "# token scopes\n"
          "0123456789abcdef-reader team-a,team_b.2\r\n"
          "\n"
          "  ops-token-fedcba9876543210\t*,@admin  \n"
          "reload-only-token-0000 @admin\n");
  request("tokens-short", 7, "short team-a\n");
  request("tokens-twice", 7, "0123456789abcdef team-a\n0123456789abcdef team-b\n");
  request("tokens-bad-scope", 7, "0123456789abcdef team-a,,@root\n");

  std::printf("fuzz_seeds: %d seeds in %s\n", written, out.c_str());
  return 0;
}
