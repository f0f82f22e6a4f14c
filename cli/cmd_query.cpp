// abf query: answer absent / maybe for each input digest, in input order.
#include <cstdint>
#include <string>
#include <vector>

#include "abf/abf.hpp"
#include "command.hpp"
#include "common.hpp"

namespace abf::cli {
namespace {

struct QueryOptions {
  std::string snapshot;
  std::string input = "-";
  std::string input_format = "hex";
  std::string output = "-";
  std::string backend = "auto";
  bool summary = false;
  unsigned threads = 0;
};

// Digests per chunk: 32 MiB of records, large enough for --backend auto to
// query on a GPU when there is one; output goes out in pieces of ~4 MiB.
constexpr std::size_t kChunk = kAutoCudaMinBatch;
constexpr std::size_t kTextPiece = std::size_t{4} << 20;

void append_line(std::string& out, const Digest& digest, Answer answer) {
  char line[64];
  write_hex(digest, line);
  out.append(line, 64);
  out.append(answer == Answer::kMaybe ? "\tmaybe\n" : "\tabsent\n");
}

int run_query(const QueryOptions& options) {
  apply_threads(options.threads);
  auto format = parse_input_format(options.input_format);
  if (!format) return report("query", format.error());
  auto backend = parse_backend(options.backend);
  if (!backend) return report("query", backend.error());
  if (*backend != Backend::kAuto && !backend_available(*backend)) {
    return report("query", Error{ErrorCode::kBackendUnavailable,
                                 "backend " + std::string(to_string(*backend)) +
                                     " cannot run here: " + cuda_device_description()});
  }
  auto filter = load_snapshot(options.snapshot);
  if (!filter) return report("query", filter.error());
  auto reader = DigestReader::open(options.input, *format);
  if (!reader) return report("query", reader.error());
  auto output = AtomicFile::create(options.output);
  if (!output) return report("query", output.error());

  std::vector<Digest> digests(kChunk);
  std::vector<Answer> answers(kChunk);
  std::string text;
  std::uint64_t total = 0;
  std::uint64_t maybe = 0;
  Progress progress("querying", reader->size_hint(), "bytes");
  while (true) {
    auto got = reader->read(digests);
    if (!got) return report("query", got.error());
    if (*got == 0) break;
    const std::span batch(digests.data(), *got);
    if (auto done = filter->query(batch, answers, *backend); !done) {
      return report("query", done.error());
    }
    total += *got;
    text.clear();
    for (std::size_t i = 0; i < *got; ++i) {
      maybe += answers[i] == Answer::kMaybe ? 1 : 0;
      if (options.summary) continue;
      append_line(text, digests[i], answers[i]);
      if (text.size() >= kTextPiece) {
        if (auto wrote = output->write(text); !wrote) return report("query", wrote.error());
        text.clear();
      }
    }
    if (auto wrote = output->write(text); !wrote) return report("query", wrote.error());
    progress.update(reader->bytes_read());
  }
  if (options.summary) {
    const std::string summary = "total\t" + std::to_string(total) + "\nabsent\t" +
                                std::to_string(total - maybe) + "\nmaybe\t" +
                                std::to_string(maybe) + "\n";
    if (auto wrote = output->write(summary); !wrote) return report("query", wrote.error());
  }
  if (auto committed = output->commit(); !committed) return report("query", committed.error());
  return kExitOk;
}

Command add_query_command(CLI::App& root) {
  auto options = std::make_shared<QueryOptions>();
  CLI::App* app =
      root.add_subcommand("query", "Answer absent or maybe for each digest, in input order");
  app->footer(
      "Output: one line per input digest, <lowercase hex><TAB><absent|maybe>.\n"
      "`absent` is a proof the digest is not in the snapshot's catalog version: skip the store.\n"
      "`maybe` means ask the store; it is never an answer on its own.\n"
      "A malformed digest is an error naming its line (or byte offset), never `absent`.\n"
      "Examples:\n"
      "  abf query --snapshot c.abf --input candidates.txt --output answers.tsv\n"
      "  abf query -s c.abf -f bin --input candidates.bin --summary");
  app->add_option("--snapshot,-s", options->snapshot, "ABF1 snapshot to query")->required();
  app->add_option("--input,-i", options->input, "Digest file, or - for standard input (default -)");
  app->add_option("--input-format,-f", options->input_format, "hex or bin (default hex)")
      ->check(CLI::IsMember({"hex", "bin"}));
  app->add_option("--output,-o", options->output,
                  "Where to write the answers (atomically), - for standard output (default -)");
  app->add_option("--backend", options->backend,
                  "auto, scalar, simd or cuda (default auto; ABF_BACKEND overrides auto)")
      ->check(CLI::IsMember({"auto", "scalar", "simd", "cuda"}));
  app->add_flag("--summary", options->summary, "Print only the counts: total, absent, maybe");
  add_threads_option(*app, options->threads);
  return {app, [options] { return run_query(*options); }};
}

}  // namespace

ABF_REGISTER_COMMAND(20, add_query_command);

}  // namespace abf::cli
