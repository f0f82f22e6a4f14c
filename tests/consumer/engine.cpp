// A program that uses the installed filter engine (abf::abf, or
// `pkg-config abf`) as a user would: builds a filter, saves it, loads it
// back and queries members and non-members with the default backend
// (auto). Prints what it did; exits non-zero on any mismatch.
//
//   engine WORK_DIR
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <abf/abf.hpp>
#include <abf/cuda/controls.hpp>

namespace {

int fail(const std::string& what) {
  std::cerr << "engine: " << what << '\n';
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return fail("usage: engine WORK_DIR");
  const std::filesystem::path snapshot = std::filesystem::path(argv[1]) / "engine.abf";

  std::vector<abf::Digest> members;
  std::vector<abf::Digest> others;
  for (int i = 0; i < 10'000; ++i) {
    members.push_back(abf::sha256("member " + std::to_string(i)));
    others.push_back(abf::sha256("other " + std::to_string(i)));
  }
  const abf::BloomSpec spec{.expected_item_count = 10'000, .target_fpp = 0.001};
  auto filter = abf::build_filter(members, spec, /*catalog_version=*/7);
  if (!filter) return fail("build: " + filter.error().describe());
  if (auto saved = abf::save_snapshot(*filter, snapshot); !saved) {
    return fail("save: " + saved.error().describe());
  }
  auto loaded = abf::load_snapshot(snapshot);
  if (!loaded) return fail("load: " + loaded.error().describe());
  if (loaded->catalog_version() != 7) return fail("load: wrong catalog version");

  std::vector<abf::Answer> answers(members.size());
  if (auto queried = loaded->query(members, answers); !queried) {
    return fail("query: " + queried.error().describe());
  }
  for (const abf::Answer answer : answers) {
    if (answer != abf::Answer::kMaybe) return fail("a member was answered absent");
  }
  if (auto queried = loaded->query(others, answers); !queried) {
    return fail("query: " + queried.error().describe());
  }
  std::uint64_t absent = 0;
  for (const abf::Answer answer : answers) absent += answer == abf::Answer::kDefinitelyNot;
  // p = 0.001 over 10,000 non-members: about 10 false positives.
  if (absent < 9'900) return fail("only " + std::to_string(absent) + " non-members absent");

  auto backend = abf::resolve_backend(abf::Backend::kAuto, others.size());
  if (!backend) return fail("resolve_backend: " + backend.error().describe());
  std::printf("abf %s: built, saved, loaded and queried %zu digests; %llu of %zu absent; "
              "auto ran %s; cuda compiled: %s\n",
              abf::kVersion, members.size(), static_cast<unsigned long long>(absent),
              others.size(), std::string(backend->name()).c_str(),
              abf::cuda_compiled() ? "yes" : "no");
  return 0;
}
