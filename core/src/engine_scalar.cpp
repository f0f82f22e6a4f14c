// The scalar reference engine: the protocol header's own loops, one digest
// at a time, with protocol 2's SipHash computed by OpenSSL. Every other
// engine is tested against these kernels. Its row is registered by
// core/CMakeLists.txt like any engine's.
#include "engine.hpp"
#include "kernels.hpp"
#include "keyed_hash.hpp"
#include "parallel.hpp"

namespace abf {

namespace scalar {

namespace {

// Step 1 of the reference by policy (abf/protocol/table.hpp): an unkeyed
// protocol's own portable step, and OpenSSL's SipHash for a keyed one (each
// keyed policy needs its overload here, or this file does not compile).
template <class P>
  requires(!P::kKeyed)
inline probe::HashPair reference_hashes(P, const probe::Scheme& scheme, const Digest& digest) {
  return P::hashes(scheme, digest.bytes.data());
}
inline probe::HashPair reference_hashes(probe::Protocol2, const probe::Scheme& scheme,
                                        const Digest& digest) {
  return detail::openssl_keyed_hashes(scheme.key, digest.bytes.data());
}
// Protocol 4's step 1 is protocol 2's SipHash: h = its first word, q its second.
inline probe::HashPair reference_hashes(probe::Protocol4, const probe::Scheme& scheme,
                                        const Digest& digest) {
  return detail::openssl_keyed_hashes(scheme.key, digest.bytes.data());
}

}  // namespace

void hash_batch(const probe::Scheme& scheme, const Digest* digests, std::size_t count,
                probe::HashPair* out) noexcept {
  probe::with_protocol(scheme.protocol, [&](auto protocol) {
    for (std::size_t i = 0; i < count; ++i) out[i] = reference_hashes(protocol, scheme, digests[i]);
  });
}

// Step 2 is the policy's own (its Probes' test and insert).
void query_batch(const probe::FilterView& view, const Digest* digests, std::size_t count,
                 Answer* answers) noexcept {
  probe::with_protocol(view.protocol, [&](auto protocol) {
    using Probes = typename decltype(protocol)::Probes;
    for (std::size_t i = 0; i < count; ++i) {
      answers[i] = Probes::test(view, view.words, reference_hashes(protocol, view, digests[i]))
                       ? Answer::kMaybe
                       : Answer::kDefinitelyNot;
    }
  });
}

void insert_batch(const probe::Scheme& scheme, std::uint64_t* words, const Digest* digests,
                  std::size_t count) noexcept {
  probe::with_protocol(scheme.protocol, [&](auto protocol) {
    using Probes = typename decltype(protocol)::Probes;
    for (std::size_t i = 0; i < count; ++i) {
      Probes::insert(scheme, words, reference_hashes(protocol, scheme, digests[i]));
    }
  });
}

}  // namespace scalar

namespace detail {

namespace {

// The reference builds on the calling thread alone, straight into the words.
class ScalarLane final : public BuildLane {
 public:
  ScalarLane(const Scheme& scheme, std::uint64_t* words) : scheme_(scheme.probe()), words_(words) {}
  Result<void> insert(std::span<const Digest> digests) override {
    scalar::insert_batch(scheme_, words_, digests.data(), digests.size());
    return {};
  }
  Result<void> finish() override { return {}; }

 private:
  probe::Scheme scheme_;
  std::uint64_t* words_;
};

}  // namespace

extern const Engine kScalarEngine{
    .name = "scalar",
    .summary =
        "the reference: one digest at a time, plain %, OpenSSL's SipHash; builds on one "
        "thread",
    .kind = EngineKind::kHost,
    .rank = 0,
    .fallback = false,
    .available = []() noexcept { return true; },
    .detail = [] { return std::string("reference"); },
    .auto_prefers = nullptr,
    .query = [](const Filter& filter, std::span<const Digest> digests,
                std::span<Answer> answers) -> Result<void> {
      parallel_query(scalar::query_batch, filter.view(), digests.data(), digests.size(),
                     answers.data());
      return {};
    },
    .open_lane = [](const Scheme& scheme,
                    std::uint64_t* words) -> Result<std::unique_ptr<BuildLane>> {
      return std::make_unique<ScalarLane>(scheme, words);
    },
    .release_caches = []() noexcept {},
};

}  // namespace detail

}  // namespace abf
