// abf completion: the command tree, for the bash completion
// (package/abf.bash) and the man pages (package/make-man-pages). Read from
// the CLI11 definitions themselves, so neither lists a subcommand, an option
// or a value by hand: the backend names, say, are --backend's own check,
// which is the library's engine table (add_backend_option). Hidden from
// `abf --help`: the output is for those scripts, not for people.
//
// One line per fact, words separated by single spaces. PATH is the command
// path joined with '/', starting at "abf" ("abf", "abf/catalog/add"):
//   sub PATH NAME...              the subcommands of PATH
//   flag PATH NAME...             the options of PATH that take no value
//   opt PATH NAME...              the options of PATH that take a value
//   choices PATH OPTION VALUE...  the values OPTION accepts, a fixed set
//   about PATH TEXT...            what PATH does: its description's first
//                                 sentence, on one line
// A line whose list would be empty is left out.
#include <cstddef>
#include <iostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "command.hpp"
#include "common.hpp"

namespace abf::cli {
namespace {

// The values of a CLI::IsMember check, which CLI11 writes into the option's
// type name as "{a,b,c}" (e.g. "TEXT:{scalar,simd,cuda,auto}"); none when
// the option has no such check.
std::vector<std::string> fixed_choices(const CLI::Option& option) {
  const std::string type = option.get_type_name();
  const std::size_t open = type.find('{');
  const std::size_t close = type.find('}', open);
  std::vector<std::string> values;
  if (open == std::string::npos || close == std::string::npos) return values;
  std::string_view list(type.data() + open + 1, close - open - 1);
  while (!list.empty()) {
    const std::size_t comma = list.find(',');
    values.emplace_back(list.substr(0, comma));
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return values;
}

void print_line(std::string_view kind, const std::string& path,
                const std::vector<std::string>& words) {
  if (words.empty()) return;
  std::cout << kind << ' ' << path;
  for (const auto& word : words) std::cout << ' ' << word;
  std::cout << '\n';
}

// Options of `app` itself and of its option groups (nameless sub-apps).
void collect_options(const CLI::App& app, std::vector<std::string>& flags,
                     std::vector<std::string>& valued,
                     std::vector<std::pair<std::string, std::vector<std::string>>>& choices) {
  for (const CLI::Option* option : app.get_options()) {
    if (!option->nonpositional()) continue;
    std::vector<std::string> names;
    for (const auto& name : option->get_snames()) names.push_back("-" + name);
    for (const auto& name : option->get_lnames()) names.push_back("--" + name);
    // Flags expect no value (CLI11's add_flag sets expected(0)).
    const bool takes_value = option->get_expected_max() > 0;
    for (const auto& name : names) (takes_value ? valued : flags).push_back(name);
    if (!takes_value) continue;
    auto values = fixed_choices(*option);
    if (values.empty()) continue;
    for (const auto& name : names) choices.emplace_back(name, values);
  }
  for (const CLI::App* group :
       app.get_subcommands([](const CLI::App* sub) { return sub->get_name().empty(); })) {
    collect_options(*group, flags, valued, choices);
  }
}

// The first sentence of a description, its lines joined, without a leading
// "abf: " (the root's description starts so).
std::string first_sentence(const CLI::App& app) {
  std::string text = app.get_description();
  for (char& c : text) {
    if (c == '\n') c = ' ';
  }
  if (const std::size_t end = text.find(". "); end != std::string::npos) text.resize(end);
  if (!text.empty() && text.back() == '.') text.pop_back();
  if (const std::string prefix = app.get_name() + ": "; text.starts_with(prefix)) {
    text.erase(0, prefix.size());
  }
  return text;
}

void describe(const CLI::App& app, const std::string& path) {
  if (const std::string about = first_sentence(app); !about.empty()) {
    std::cout << "about " << path << ' ' << about << '\n';
  }
  // Hidden subcommands (an empty group, as this one) stay hidden.
  const auto subcommands = app.get_subcommands([](const CLI::App* sub) {
    return !sub->get_name().empty() && !sub->get_group().empty() && !sub->get_disabled();
  });
  std::vector<std::string> names;
  for (const CLI::App* sub : subcommands) names.push_back(sub->get_name());
  print_line("sub", path, names);

  std::vector<std::string> flags;
  std::vector<std::string> valued;
  std::vector<std::pair<std::string, std::vector<std::string>>> choices;
  collect_options(app, flags, valued, choices);
  print_line("flag", path, flags);
  print_line("opt", path, valued);
  for (const auto& [option, values] : choices) print_line("choices", path + " " + option, values);

  for (const CLI::App* sub : subcommands) describe(*sub, path + "/" + sub->get_name());
}

Command add_completion_command(CLI::App& root) {
  CLI::App* app = root.add_subcommand(
      "completion", "Print the command tree the bash completion and the man pages read");
  app->group("");  // hidden
  return {app, [&root] {
            describe(root, "abf");
            return kExitOk;
          }};
}

}  // namespace

ABF_REGISTER_COMMAND(90, add_completion_command);

}  // namespace abf::cli
