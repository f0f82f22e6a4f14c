// abf key: make the secret key of keyed (hash protocol 2) snapshots.
#include <iostream>
#include <memory>
#include <string>

#include "abf/abf.hpp"
#include "command.hpp"
#include "common.hpp"

namespace abf::cli {
namespace {

struct KeyOptions {
  std::string output;
  bool json = false;
};

int run_generate(const KeyOptions& options) {
  // Never over an existing file, but a name SQLite gives its files beside
  // a database (c.db-journal) it may still not take.
  if (auto clash = output_overwrites_input(CommandFiles(), "--output", options.output)) {
    return usage_error("key generate", *clash);
  }
  auto key = Key::generate();
  if (!key) return report("key generate", key.error());
  if (auto written = write_key_file(*key, options.output); !written) {
    return report("key generate", written.error());
  }
  // Only the fingerprint is ever printed: it names the key (inspect shows
  // the one a snapshot needs) without revealing it.
  const std::string fingerprint = key_fingerprint(*key).hex();
  const std::string out =
      options.json ? json_text({{"key_file", options.output}, {"key_fingerprint", fingerprint}})
                   : fingerprint + "\n";
  if (auto wrote = write_stdout(out); !wrote) {
    return report("key generate",
                  Error{wrote.error().code,
                        "wrote " + options.output +
                            ", but printing its fingerprint failed: " + wrote.error().message});
  }
  if (!options.json) {
    std::cerr << "abf key generate: wrote " << options.output << " (mode 0600); key fingerprint "
              << fingerprint << ". Keep it: snapshots built with it answer only with it.\n";
  }
  return kExitOk;
}

Command add_key_command(CLI::App& root) {
  auto options = std::make_shared<KeyOptions>();
  CLI::App* app =
      root.add_subcommand("key", "Make the secret key of keyed (hash protocol 2) snapshots");
  app->require_subcommand(1);
  app->footer(
      "A keyed snapshot places each digest's bits by SipHash under a 16-byte secret key, so\n"
      "no one without the key can choose digests that collide or read members off the\n"
      "filter. build, query, merge, dedup and inspect take it with --key-file. The key is\n"
      "never written into a snapshot or printed; its fingerprint names it.\n"
      "Example:\n"
      "  abf key generate --output abf.key\n"
      "  abf build -n 1000000 -p 0.001 --key-file abf.key -i catalog.txt -o keyed.abf");
  CLI::App* generate = app->add_subcommand(
      "generate",
      "Write a new random key (mode 0600, never over an existing file); print its fingerprint");
  generate->add_option("--output,-o", options->output, "Key file to create")
      ->required()
      ->check(not_a_stream("a key file: the key itself is never printed"));
  generate->add_flag("--json", options->json,
                     "Print {\"key_file\", \"key_fingerprint\"} instead of the fingerprint");
  return {app, [options, generate] {
            if (generate->parsed()) return run_generate(*options);
            return kExitUsage;
          }};
}

}  // namespace

ABF_REGISTER_COMMAND(55, add_key_command);

}  // namespace abf::cli
