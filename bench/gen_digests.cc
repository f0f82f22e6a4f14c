// abf_gen_digests: writes pseudo-random 32-byte digests to standard output,
// as `abf build -f bin` and `abf query -f bin` read them, for measurements
// whose input is too large to keep on disk (docs/performance.md, "Filter
// sets"): pipe it straight into abf.
//
//   abf_gen_digests COUNT SEED [FIRST]
//
// Digest i of stream SEED is four splitmix64 outputs of a counter (SEED,
// i), so any prefix of a stream is the same whatever COUNT, FIRST skips the
// first digests, and two seeds give disjoint streams (a collision of 256
// random bits is not going to happen).
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

std::uint64_t splitmix64(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

bool write_all(const std::uint8_t* data, std::size_t size) {
  while (size > 0) {
    const ssize_t wrote = ::write(STDOUT_FILENO, data, size);
    if (wrote < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += wrote;
    size -= static_cast<std::size_t>(wrote);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4) {
    std::fprintf(stderr, "usage: abf_gen_digests COUNT SEED [FIRST]\n");
    return 2;
  }
  const std::uint64_t count = std::strtoull(argv[1], nullptr, 10);
  const std::uint64_t seed = std::strtoull(argv[2], nullptr, 10);
  const std::uint64_t first = argc == 4 ? std::strtoull(argv[3], nullptr, 10) : 0;
  constexpr std::size_t kBatch = 1 << 16;  // digests per write: 2 MiB
  std::vector<std::uint8_t> buffer(kBatch * 32);
  const std::uint64_t stream = splitmix64(seed) << 8;
  for (std::uint64_t done = 0; done < count;) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(kBatch, count - done));
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint64_t index = first + done + i;
      for (std::uint64_t w = 0; w < 4; ++w) {
        const std::uint64_t word = splitmix64(splitmix64(stream ^ w) ^ index);
        std::memcpy(buffer.data() + i * 32 + w * 8, &word, 8);
      }
    }
    if (!write_all(buffer.data(), n * 32)) {
      std::fprintf(stderr, "abf_gen_digests: write error: %s\n", std::strerror(errno));
      return 1;
    }
    done += n;
  }
  return 0;
}
