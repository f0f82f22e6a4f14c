// A program that uses the installed service layer (abf::service, or
// `pkg-config abf-service`): a SQLite catalog, its filter built, saved and
// published from the file, and existence answers that must equal the
// catalog's. Exits non-zero on any mismatch.
//
//   service WORK_DIR
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <abf/abf.hpp>
#include <abf/service/service.hpp>
#include <abf/service/sqlite_catalog.hpp>

namespace {

int fail(const std::string& what) {
  std::cerr << "service: " << what << '\n';
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return fail("usage: service WORK_DIR");
  const std::filesystem::path dir = argv[1];
  std::filesystem::remove(dir / "service.db");

  auto catalog = abf::service::SqliteCatalog::create(dir / "service.db");
  if (!catalog) return fail("create: " + catalog.error().describe());
  std::vector<abf::Digest> members;
  std::vector<abf::Digest> others;
  for (int i = 0; i < 1'000; ++i) {
    members.push_back(abf::sha256("member " + std::to_string(i)));
    others.push_back(abf::sha256("other " + std::to_string(i)));
  }
  if (auto added = catalog->add(members); !added) return fail("add: " + added.error().describe());
  auto version = catalog->latest_version();
  if (!version) return fail("latest_version: " + version.error().describe());

  const abf::BloomSpec spec{.expected_item_count = 1'000, .target_fpp = 0.01};
  auto filter = abf::service::build_filter_from_catalog(*catalog, *version, spec);
  if (!filter) return fail("build: " + filter.error().describe());
  if (auto saved = abf::save_snapshot(*filter, dir / "service.abf"); !saved) {
    return fail("save: " + saved.error().describe());
  }

  abf::service::Metrics metrics;
  abf::service::SnapshotPublisher publisher(&metrics, *catalog);
  if (auto published = publisher.load_and_publish(dir / "service.abf"); !published) {
    return fail("publish: " + published.error().describe());
  }
  abf::service::ArtifactExistenceService service(publisher, *catalog, &metrics);
  for (const auto& digest : members) {
    auto answer = service.exists(digest);
    if (!answer) return fail("exists: " + answer.error().describe());
    if (!answer->exists) return fail("a member was answered absent");
  }
  int negatives = 0;
  for (const auto& digest : others) {
    auto answer = service.exists(digest);
    if (!answer) return fail("exists: " + answer.error().describe());
    if (answer->exists) return fail("a non-member was answered present");
    negatives += answer->filter_negative;
  }
  if (negatives < 950) return fail("the filter proved only " + std::to_string(negatives) + " absent");
  std::printf("abf service: catalog of %zu at version %llu; %d of %zu absent by the filter alone\n",
              members.size(), static_cast<unsigned long long>(*version), negatives, others.size());
  return 0;
}
