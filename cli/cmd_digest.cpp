// abf digest: SHA-256 of files, printed exactly as GNU sha256sum prints them
// (escaped names included), so real artifacts feed straight into `abf build`
// and `abf query`, and `sha256sum -c` checks the output.
#include <memory>
#include <string>
#include <vector>

#include "abf/abf.hpp"
#include "command.hpp"
#include "common.hpp"

namespace abf::cli {
namespace {

struct DigestOptions {
  std::vector<std::string> files;
  bool zero = false;
  bool json = false;
};

// The record `sha256sum -z` prints: the name as it is (never escaped, so
// it may hold newlines), then a NUL; build, query and the others read it
// back (parse_digest_record).
std::string sha256sum_zero_record(const Digest& digest, std::string_view name) {
  std::string record = digest.hex();
  record += "  ";
  record += name;
  record += '\0';
  return record;
}

int run_digest(const DigestOptions& options) {
  // No files: standard input, named "-" as sha256sum names it.
  const std::vector<std::string> files =
      options.files.empty() ? std::vector<std::string>{"-"} : options.files;
  int status = kExitOk;
  nlohmann::ordered_json listed = nlohmann::ordered_json::array();
  for (const auto& file : files) {
    Result<Digest> digest;
    {
      const Activity activity("hashing " + file);
      digest = sha256_file(file == "-" ? "/dev/stdin" : file);
    }
    if (!digest) {
      std::string& message = digest.error().message;
      if (file == "-" && message.starts_with("/dev/stdin")) message.replace(0, 10, "<stdin>");
      status = report("digest", digest.error());  // go on with the others, like sha256sum
      continue;
    }
    if (options.json) {
      listed.push_back({{"file", file}, {"sha256", digest->hex()}});
      continue;
    }
    // Each line as soon as its file is hashed, as sha256sum does; a failed
    // write ends the command.
    const std::string line =
        options.zero ? sha256sum_zero_record(*digest, file) : sha256sum_line(*digest, file);
    if (auto wrote = write_stdout(line); !wrote) {
      return report("digest", wrote.error());
    }
  }
  if (options.json) {
    const nlohmann::ordered_json json = {{"files", listed}};
    if (auto wrote = write_stdout(json_text(json)); !wrote) return report("digest", wrote.error());
  }
  return status;
}

Command add_digest_command(CLI::App& root) {
  auto options = std::make_shared<DigestOptions>();
  CLI::App* app =
      root.add_subcommand("digest", "Print the SHA-256 of files, exactly as sha256sum prints it");
  app->footer(
      "Output lines `<hex>  <name>` feed straight into build and query, and `sha256sum -c`\n"
      "checks them: a name holding a backslash, newline or carriage return is written as\n"
      "GNU sha256sum writes it (the line starts with '\\', and those characters become \\\\,\n"
      "\\n and \\r). With no files, or a file -, standard input is hashed, named -.\n"
      "A file that cannot be read is reported on stderr and the others are still hashed;\n"
      "the exit status is then 1.\n"
      "-z ends each line with a NUL instead of a newline and writes names as they are\n"
      "(sha256sum -z): build, query, dedup and catalog add read it back, names with\n"
      "newlines included.\n"
      "Examples:\n"
      "  abf digest blobs/* > catalog.txt\n"
      "  tar -cf - dir | abf digest\n"
      "  abf digest a.bin b.bin --json\n"
      "  abf digest -z blobs/* | abf build -n 1000000 -p 0.001 -o c.abf");
  app->add_option("files", options->files,
                  "Files to hash (- for standard input; default: standard input)");
  CLI::Option* zero = app->add_flag(
      "-z,--zero", options->zero,
      "End each line with NUL, not newline, and leave names unescaped (sha256sum -z)");
  app->add_flag("--json", options->json,
                "One JSON object, {\"files\": [{\"file\", \"sha256\"}...]}, instead of lines")
      ->excludes(zero);
  return {app, [options] { return run_digest(*options); }};
}

}  // namespace

ABF_REGISTER_COMMAND(40, add_digest_command);

}  // namespace abf::cli
