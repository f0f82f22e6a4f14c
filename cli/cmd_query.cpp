// abf query: answer absent / maybe for each input digest, in input order.
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <future>
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
  std::string key_file;
  bool summary = false;
  bool json = false;
  unsigned threads = 0;
};

// Digests per chunk: 8 MiB of records. Deliberately below kAutoCudaMinBatch,
// so --backend auto queries on the CPU: on a 16-core H200 host, a GPU query
// of 1 GiB of digests (2^25) against a 114 MiB filter lost to SIMD end to
// end, 806 against 612 ms (creating the CUDA context and uploading the
// filter cost more than the GPU saved; docs/cuda.md). --backend cuda still
// uses it.
constexpr std::size_t kChunk = std::size_t{256} << 10;
// Output lines formatted per task: about 4.6 MiB of text.
constexpr std::size_t kLinesPerPiece = std::size_t{64} << 10;

void append_line(std::string& out, const Digest& digest, Answer answer) {
  char line[64];
  write_hex(digest, line);
  out.append(line, 64);
  out.append(answer == Answer::kMaybe ? "\tmaybe\n" : "\tabsent\n");
}

// Writes the lines of one answered chunk, in order: pieces of
// kLinesPerPiece lines are formatted on every core of the arena, one wave
// of them at a time, so the text in memory stays a few MiB per core.
Result<void> write_lines(DataOutput& output, std::span<const Digest> digests,
                         std::span<const Answer> answers, std::vector<std::string>& pieces) {
  const std::size_t count = digests.size();
  const std::size_t total_pieces = (count + kLinesPerPiece - 1) / kLinesPerPiece;
  for (std::size_t first = 0; first < total_pieces; first += pieces.size()) {
    const std::size_t wave = std::min(pieces.size(), total_pieces - first);
    tbb::parallel_for(std::size_t{0}, wave, [&](std::size_t w) {
      std::string& text = pieces[w];
      text.clear();
      const std::size_t begin = (first + w) * kLinesPerPiece;
      const std::size_t end = std::min(count, begin + kLinesPerPiece);
      for (std::size_t i = begin; i < end; ++i) append_line(text, digests[i], answers[i]);
    });
    for (std::size_t w = 0; w < wave; ++w) {
      if (auto wrote = output.write(pieces[w]); !wrote) return wrote;
    }
  }
  return {};
}

int run_query(const QueryOptions& options) {
  if (options.snapshot == "-" && options.input == "-") {
    return usage_error("query",
                       "--snapshot - and --input - both read standard input; give one a file");
  }
  CommandFiles inputs;
  inputs.add_filter_set("--snapshot", options.snapshot);
  inputs.add_file("--input", options.input);
  inputs.add_file("--key-file", options.key_file);
  if (auto clash = output_overwrites_input(inputs, "--output", options.output)) {
    return usage_error("query", *clash);
  }
  apply_threads(options.threads);
  auto format = parse_input_format(options.input_format);
  if (!format) return report("query", format.error());
  auto backend = backend_from_option(options.backend);
  if (!backend) return report("query", backend.error());
  auto key = key_from_option(options.key_file);
  if (!key) return report("query", key.error());
  LoadOptions load_options;
  load_options.key = std::move(*key);
  auto filter = load_set_argument(options.snapshot, load_options);
  if (!filter) return report("query", filter.error());
  auto reader = DigestReader::open(options.input, *format);
  if (!reader) return report("query", reader.error());
  auto output = DataOutput::create(options.output);
  if (!output) return report("query", output.error());

  // Two input buffers: the next chunk is read on another thread while this
  // one is probed and written.
  std::array<std::vector<Digest>, 2> digests{std::vector<Digest>(kChunk),
                                             std::vector<Digest>(kChunk)};
  std::vector<Answer> answers(kChunk);
  std::vector<std::string> pieces(
      std::max<std::size_t>(1, tbb::this_task_arena::max_concurrency()));
  std::uint64_t total = 0;
  std::uint64_t maybe = 0;
  Progress progress("querying", reader->size_hint(), "bytes");
  auto read_into = [&reader](std::vector<Digest>& buffer) { return reader->read(buffer); };
  Result<std::size_t> got = read_into(digests[0]);
  for (std::size_t current = 0;; current ^= 1) {
    if (!got) return report("query", got.error());
    if (*got == 0) break;
    const std::size_t count = *got;
    auto next = std::async(std::launch::async, read_into, std::ref(digests[current ^ 1]));
    const std::span batch(digests[current].data(), count);
    const std::span batch_answers(answers.data(), count);
    Result<void> done = filter->query(batch, batch_answers, *backend);
    if (done) {
      total += count;
      maybe += static_cast<std::uint64_t>(
          std::count(batch_answers.begin(), batch_answers.end(), Answer::kMaybe));
      if (!options.summary) done = write_lines(*output, batch, batch_answers, pieces);
    }
    got = next.get();  // joined before any return: the reader is not left in use
    if (!done) return report("query", done.error());
    progress.update(reader->bytes_read());
  }
  if (options.summary) {
    const std::string summary =
        options.json
            ? json_text({{"total", total}, {"absent", total - maybe}, {"maybe", maybe}})
            : "total\t" + std::to_string(total) + "\nabsent\t" + std::to_string(total - maybe) +
                  "\nmaybe\t" + std::to_string(maybe) + "\n";
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
      "A malformed digest is an error naming its line (or byte offset), never `absent`;\n"
      "on any error nothing is written: an --output file is left as it was, and answers for\n"
      "standard output (-, the default) are staged (in memory up to 1 MiB, then in an\n"
      "unlinked temporary file in $TMPDIR, default /tmp: 72 bytes a digest) and copied\n"
      "to stdout only when every digest is answered, so they appear when the query ends.\n"
      "A keyed snapshot (hash protocol 2) answers only with its --key-file: without it the\n"
      "query fails (key_required), with another key too (key_mismatch).\n"
      "A filter set is queried by its manifest (abf build --shards): each digest goes to its\n"
      "shard inside the batch, and the answers are those of each shard alone. A set cannot\n"
      "come from standard input (its shards are files beside the manifest).\n"
      "Examples:\n"
      "  abf query --snapshot c.abf --input candidates.txt --output answers.tsv\n"
      "  abf query -s c.abf -f bin --input candidates.bin --summary --json\n"
      "  abf build -n 1000 -p 0.01 -i members.txt -o - | abf query -s - -i candidates.txt");
  app->add_option("--snapshot,-s", options->snapshot,
                  "ABF1 snapshot or filter-set manifest to query, or - for a snapshot on\n"
                  "standard input (then --input is a file)")
      ->required();
  app->add_option("--input,-i", options->input, "Digest file, or - for standard input (default -)");
  app->add_option("--input-format,-f", options->input_format, "hex or bin (default hex)")
      ->check(CLI::IsMember({"hex", "bin"}));
  app->add_option("--output,-o", options->output,
                  "Where to write the answers (atomically), - for standard output (default -)");
  add_key_file_option(*app, options->key_file, "query a keyed snapshot");
  add_backend_option(*app, options->backend, "Probe engine");
  auto* summary =
      app->add_flag("--summary", options->summary, "Print only the counts: total, absent, maybe");
  app->add_flag("--json", options->json,
                "With --summary: the counts as one JSON object {total, absent, maybe}")
      ->needs(summary);
  add_threads_option(*app, options->threads, /*reads_ahead=*/true);
  return {app, [options] { return run_query(*options); }};
}

}  // namespace

ABF_REGISTER_COMMAND(20, add_query_command);

}  // namespace abf::cli
