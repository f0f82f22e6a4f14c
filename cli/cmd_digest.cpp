// abf digest: SHA-256 of files, as sha256sum prints them, so real artifacts
// feed straight into `abf build` and `abf query`.
#include <iostream>
#include <string>
#include <vector>

#include "abf/abf.hpp"
#include "command.hpp"
#include "common.hpp"

namespace abf::cli {
namespace {

struct DigestOptions {
  std::vector<std::string> files;
};

int run_digest(const DigestOptions& options) {
  int status = kExitOk;
  for (const auto& file : options.files) {
    auto digest = sha256_file(file == "-" ? "/dev/stdin" : file);
    if (!digest) {
      status = report("digest", digest.error());  // go on with the others, like sha256sum
      continue;
    }
    std::cout << digest->hex() << "  " << file << '\n';
  }
  std::cout.flush();
  return status;
}

Command add_digest_command(CLI::App& root) {
  auto options = std::make_shared<DigestOptions>();
  CLI::App* app =
      root.add_subcommand("digest", "Print the SHA-256 of files, in sha256sum's format");
  app->footer(
      "Output lines `<hex>  <name>` feed straight into build and query.\n"
      "Example: abf digest blobs/* > catalog.txt");
  app->add_option("files", options->files, "Files to hash (- for standard input)")->required();
  return {app, [options] { return run_digest(*options); }};
}

}  // namespace

ABF_REGISTER_COMMAND(40, add_digest_command);

}  // namespace abf::cli
