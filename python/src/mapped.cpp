// mode="map" without SIGBUS: a file mapped by Filter/FilterSet/Index and
// then truncated in place loses pages, and the next read of one of them
// raises SIGBUS, which would kill the interpreter (the abf command never
// maps for this reason; it always copies).
//
// The binding registers every mapping it makes (its address range, device
// and inode, found in /proc/self/maps) and installs a SIGBUS handler. For
// a fault inside a registered range that still maps the same file, the
// handler maps zero pages over the lost ones (from the faulting page to the
// mapping's end) and marks the range damaged, then returns: the faulting
// read, on whichever thread (a TBB worker), reads zeros and carries on, and
// the Python call that reads a damaged mapping raises abf.IoError once it
// ends, and on every later call. Any other SIGBUS goes to the handler that
// was there before (the default: the process dies, as without us).
//
// The handler does only async-signal-safe work: open/read/close of
// /proc/self/maps with a parser on the stack, mmap, atomics. Registered
// ranges are never freed (entries are a few words each, chunks are never
// moved), so the handler can read them while a registration runs.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common.hpp"

namespace abf::python {

namespace {

struct MapRange {
  std::uintptr_t begin = 0;
  std::uintptr_t end = 0;
  std::uint64_t device_major = 0;
  std::uint64_t device_minor = 0;
  std::uint64_t inode = 0;
  std::atomic<bool> damaged{false};
};

constexpr std::size_t kChunkSize = 4096;
constexpr std::size_t kMaxChunks = 4096;  // 16 Mi mappings over a process's life
std::array<std::atomic<MapRange*>, kMaxChunks> g_chunks{};
std::atomic<std::size_t> g_count{0};
std::mutex g_register_mutex;
struct sigaction g_previous {};
std::atomic<bool> g_installed{false};

MapRange* range_at(std::size_t i) {
  MapRange* chunk = g_chunks[i / kChunkSize].load(std::memory_order_acquire);
  return chunk == nullptr ? nullptr : chunk + i % kChunkSize;
}

// One line of /proc/self/maps: "begin-end perms offset major:minor inode path".
struct MapsLine {
  std::uintptr_t begin = 0;
  std::uintptr_t end = 0;
  std::uint64_t major = 0;
  std::uint64_t minor = 0;
  std::uint64_t inode = 0;
};

// Parses a number in base 16 or 10 from text[at...]; stops at the first
// other character. Async-signal-safe.
std::uint64_t parse_number(const char* text, std::size_t length, std::size_t& at, int base) {
  std::uint64_t value = 0;
  for (; at < length; ++at) {
    const char c = text[at];
    int digit = -1;
    if (c >= '0' && c <= '9') digit = c - '0';
    if (base == 16 && c >= 'a' && c <= 'f') digit = c - 'a' + 10;
    if (digit < 0) break;
    value = value * static_cast<std::uint64_t>(base) + static_cast<std::uint64_t>(digit);
  }
  return value;
}

bool parse_line(const char* text, std::size_t length, MapsLine& line) {
  std::size_t at = 0;
  line.begin = parse_number(text, length, at, 16);
  if (at >= length || text[at] != '-') return false;
  ++at;
  line.end = parse_number(text, length, at, 16);
  for (int field = 0; field < 2; ++field) {  // perms, offset
    while (at < length && text[at] == ' ') ++at;
    while (at < length && text[at] != ' ') ++at;
  }
  while (at < length && text[at] == ' ') ++at;
  line.major = parse_number(text, length, at, 16);
  if (at >= length || text[at] != ':') return false;
  ++at;
  line.minor = parse_number(text, length, at, 16);
  while (at < length && text[at] == ' ') ++at;
  line.inode = parse_number(text, length, at, 10);
  return true;
}

// The /proc/self/maps line whose range holds `address`. Async-signal-safe.
bool find_mapping(std::uintptr_t address, MapsLine& found) {
  const int fd = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buffer[4096];
  char line[512];
  std::size_t line_length = 0;
  bool ok = false;
  for (;;) {
    const ssize_t got = ::read(fd, buffer, sizeof buffer);
    if (got <= 0) break;
    for (ssize_t i = 0; i < got && !ok; ++i) {
      if (buffer[i] != '\n') {
        if (line_length < sizeof line) line[line_length++] = buffer[i];
        continue;
      }
      MapsLine parsed;
      if (parse_line(line, line_length, parsed) && parsed.begin <= address &&
          address < parsed.end) {
        found = parsed;
        ok = true;
      }
      line_length = 0;
    }
    if (ok) break;
  }
  ::close(fd);
  return ok;
}

void pass_on(int signal, siginfo_t* info, void* context) {
  if ((g_previous.sa_flags & SA_SIGINFO) != 0 && g_previous.sa_sigaction != nullptr) {
    g_previous.sa_sigaction(signal, info, context);
    return;
  }
  if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN &&
      g_previous.sa_handler != nullptr) {
    g_previous.sa_handler(signal);
    return;
  }
  // The default: returning re-runs the faulting read, which faults again
  // and now kills the process as SIGBUS always did.
  struct sigaction fallback {};
  fallback.sa_handler = SIG_DFL;
  sigemptyset(&fallback.sa_mask);
  ::sigaction(SIGBUS, &fallback, nullptr);
  if (info == nullptr || info->si_code <= 0) ::raise(SIGBUS);  // sent, not a fault
}

void on_sigbus(int signal, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  bool handled = false;
  bool already_repaired = false;
  if (info != nullptr && info->si_code > 0) {
    const auto address = reinterpret_cast<std::uintptr_t>(info->si_addr);
    const std::size_t count = g_count.load(std::memory_order_acquire);
    MapsLine line;
    bool have_line = false;
    for (std::size_t i = 0; i < count; ++i) {
      MapRange* range = range_at(i);
      if (range == nullptr || address < range->begin || address >= range->end) continue;
      if (!have_line && !find_mapping(address, line)) break;
      have_line = true;
      // Two threads that fault in the same mapping at once: the first maps
      // zeros over the page the second faulted on before the second's
      // handler reads /proc/self/maps, which then shows the anonymous zero
      // mapping (inode 0) there. The range is already marked damaged (the
      // store comes before the mmap), and returning re-runs the read,
      // which now reads zeros. Passing it on instead would restore the
      // default handler and kill the process at the next fault.
      if (line.inode == 0 && range->damaged.load(std::memory_order_acquire)) {
        already_repaired = true;
        continue;
      }
      // Still the file it was registered for: not an address reused since.
      if (line.inode != range->inode || line.major != range->device_major ||
          line.minor != range->device_minor) {
        continue;
      }
      range->damaged.store(true, std::memory_order_release);
      handled = true;
    }
    if (!handled && already_repaired) {
      errno = saved_errno;
      return;
    }
    if (handled) {
      const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
      const std::uintptr_t first = address & ~(page - 1);
      void* zeros = ::mmap(reinterpret_cast<void*>(first), line.end - first, PROT_READ,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
      handled = zeros != MAP_FAILED;
    }
  }
  errno = saved_errno;
  if (!handled) pass_on(signal, info, context);
}

void install_handler() {
  struct sigaction current {};
  ::sigaction(SIGBUS, nullptr, &current);
  if ((current.sa_flags & SA_SIGINFO) != 0 && current.sa_sigaction == &on_sigbus) return;
  struct sigaction action {};
  action.sa_sigaction = &on_sigbus;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  g_previous = current;
  ::sigaction(SIGBUS, &action, nullptr);
  g_installed.store(true, std::memory_order_release);
}

}  // namespace

struct MapGuard {
  std::vector<MapRange*> ranges;
  std::string what;
};

void guard_mappings(std::shared_ptr<MapGuard>& guard, const std::vector<const void*>& inside,
                    const std::string& what) {
  // /proc/self/maps read once, for a set of up to 65,536 shards.
  std::vector<MapsLine> lines;
  {
    std::ifstream maps("/proc/self/maps");
    std::string text;
    while (std::getline(maps, text)) {
      MapsLine line;
      if (parse_line(text.data(), text.size(), line) && line.inode != 0) lines.push_back(line);
    }
  }
  std::lock_guard lock(g_register_mutex);
  install_handler();
  for (const void* pointer : inside) {
    const auto address = reinterpret_cast<std::uintptr_t>(pointer);
    const auto after =
        std::upper_bound(lines.begin(), lines.end(), address,
                         [](std::uintptr_t a, const MapsLine& line) { return a < line.begin; });
    if (pointer == nullptr || after == lines.begin()) continue;
    const MapsLine& line = *std::prev(after);
    if (address >= line.end) continue;  // not a file mapping: nothing to guard
    const std::size_t i = g_count.load(std::memory_order_relaxed);
    if (i >= kChunkSize * kMaxChunks) return;
    if (g_chunks[i / kChunkSize].load(std::memory_order_relaxed) == nullptr) {
      g_chunks[i / kChunkSize].store(new MapRange[kChunkSize], std::memory_order_release);
    }
    MapRange* range = range_at(i);
    range->begin = line.begin;
    range->end = line.end;
    range->device_major = line.major;
    range->device_minor = line.minor;
    range->inode = line.inode;
    range->damaged.store(false, std::memory_order_relaxed);
    g_count.store(i + 1, std::memory_order_release);
    if (!guard) guard = std::make_shared<MapGuard>();
    if (guard->what.empty()) guard->what = what;
    guard->ranges.push_back(range);
  }
}

void guard_mapping(std::shared_ptr<MapGuard>& guard, const void* inside, const std::string& what) {
  guard_mappings(guard, {inside}, what);
}

void join_guards(std::shared_ptr<MapGuard>& into, const std::shared_ptr<MapGuard>& from) {
  if (!from || from == into) return;
  if (!into) {
    into = from;
    return;
  }
  auto joined = std::make_shared<MapGuard>(*into);
  joined->ranges.insert(joined->ranges.end(), from->ranges.begin(), from->ranges.end());
  into = std::move(joined);
}

void check_mapping(const std::shared_ptr<MapGuard>& guard) {
  if (!guard) return;
  for (const MapRange* range : guard->ranges) {
    if (range->damaged.load(std::memory_order_acquire)) {
      raise(ErrorCode::kIo,
            guard->what +
                ": the mapped file was truncated while in use (mode=\"map\"); its lost pages "
                "read as zeros, so answers from it are wrong: load it again (a file loaded "
                "with mode=\"map\" must only ever be replaced by rename)");
    }
  }
}

}  // namespace abf::python
