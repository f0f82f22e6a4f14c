// A bounded HTTP/1.1 load client for `abf serve` (docs/performance.md): one
// keep-alive connection per thread, one request in flight on each, for a
// fixed time; every answer's status is checked. Reads with a 1 MiB buffer, so
// that a 2 MiB answer costs the client a few system calls (wrk reads 8 KiB at
// a time, and cannot parse HEAD answers that carry a Content-Length).
//
//   abf_serve_load batch HOST:PORT PATH BODY.bin CONNECTIONS SECONDS
//       POST BODY.bin (application/octet-stream) to PATH again and again;
//       digests/s counts the body's 32-byte records.
//   abf_serve_load head HOST:PORT PATHS.txt CONNECTIONS SECONDS
//       HEAD each path of PATHS.txt in turn; 200 and 404 are answers.
// Prints one JSON line: requests, errors, requests/s, digests/s, latency
// percentiles in microseconds.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

int connect_to(const std::string& host, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  ::inet_pton(AF_INET, host.c_str(), &address.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    ::close(fd);
    return -1;
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

bool send_all(int fd, const std::string& data) {
  std::size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<std::size_t>(n);
  }
  return true;
}

// Reads one response; returns its status, or -1. `head`: no body follows.
int read_response(int fd, std::vector<char>& buffer, bool head) {
  std::size_t have = 0;
  std::size_t header_end = std::string::npos;
  for (;;) {
    if (have == buffer.size()) buffer.resize(buffer.size() * 2);
    const ssize_t n = ::recv(fd, buffer.data() + have, buffer.size() - have, 0);
    if (n <= 0) return -1;
    have += static_cast<std::size_t>(n);
    const std::string_view text(buffer.data(), have);
    header_end = text.find("\r\n\r\n");
    if (header_end != std::string_view::npos) break;
  }
  const std::string_view headers(buffer.data(), header_end);
  const int status = std::atoi(std::string(headers.substr(9, 3)).c_str());
  std::size_t length = 0;
  std::string lower(headers);
  std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
  const auto at = lower.find("\r\ncontent-length:");
  if (at != std::string::npos) length = std::strtoull(lower.c_str() + at + 17, nullptr, 10);
  if (head) length = 0;
  std::size_t body = have - header_end - 4;
  while (body < length) {
    const std::size_t want = std::min(buffer.size(), length - body);
    const ssize_t n = ::recv(fd, buffer.data(), want, 0);
    if (n <= 0) return -1;
    body += static_cast<std::size_t>(n);
  }
  return status;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (!((mode == "batch" && argc == 7) || (mode == "head" && argc == 6))) {
    std::fprintf(stderr,
                 "usage: %s batch HOST:PORT PATH BODY.bin CONNECTIONS SECONDS\n"
                 "       %s head HOST:PORT PATHS.txt CONNECTIONS SECONDS\n",
                 argv[0], argv[0]);
    return 2;
  }
  const std::string target = argv[2];
  const std::string host = target.substr(0, target.rfind(':'));
  const int port = std::atoi(target.c_str() + target.rfind(':') + 1);
  const bool batch = mode == "batch";
  const int connections = std::atoi(argv[batch ? 5 : 4]);
  const double seconds = std::atof(argv[batch ? 6 : 5]);
  std::vector<std::string> requests;
  std::size_t records = 0;
  if (batch) {
    const std::string body = read_file(argv[4]);
    records = body.size() / 32;
    requests.push_back(std::string("POST ") + argv[3] + " HTTP/1.1\r\nHost: " + target +
                       "\r\nContent-Type: application/octet-stream\r\nContent-Length: " +
                       std::to_string(body.size()) + "\r\n\r\n" + body);
  } else {
    std::istringstream paths(read_file(argv[3]));
    for (std::string path; std::getline(paths, path);) {
      if (!path.empty())
        requests.push_back("HEAD " + path + " HTTP/1.1\r\nHost: " + target + "\r\n\r\n");
    }
  }
  std::atomic<std::uint64_t> done{0}, errors{0};
  std::mutex latency_mutex;
  std::vector<std::uint32_t> latencies;
  const auto start = Clock::now();
  const auto until = start + std::chrono::duration<double>(seconds);
  std::vector<std::thread> threads;
  for (int c = 0; c < connections; ++c) {
    threads.emplace_back([&, c] {
      std::vector<std::uint32_t> mine;
      std::vector<char> buffer(1 << 20);
      int fd = connect_to(host, port);
      std::size_t next = static_cast<std::size_t>(c) * 7919;
      while (fd >= 0 && Clock::now() < until) {
        const std::string& request = requests[next++ % requests.size()];
        const auto sent = Clock::now();
        const bool ok = send_all(fd, request);
        const int status = ok ? read_response(fd, buffer, !batch) : -1;
        mine.push_back(static_cast<std::uint32_t>(
            std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - sent).count()));
        if (status == 200 || (!batch && status == 404)) {
          done.fetch_add(1, std::memory_order_relaxed);
        } else {
          errors.fetch_add(1, std::memory_order_relaxed);
          ::close(fd);
          fd = connect_to(host, port);
        }
      }
      if (fd >= 0) ::close(fd);
      const std::lock_guard lock(latency_mutex);
      latencies.insert(latencies.end(), mine.begin(), mine.end());
    });
  }
  for (auto& thread : threads) thread.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  std::sort(latencies.begin(), latencies.end());
  const auto percentile = [&](double p) -> std::uint32_t {
    if (latencies.empty()) return 0;
    return latencies[std::min(latencies.size() - 1,
                              static_cast<std::size_t>(p * static_cast<double>(latencies.size())))];
  };
  std::printf(
      "{\"mode\":\"%s\",\"connections\":%d,\"seconds\":%.3f,\"requests\":%llu,\"errors\":%llu,"
      "\"requests_per_second\":%.1f,\"digests_per_second\":%.0f,\"p50_us\":%u,\"p99_us\":%u}\n",
      mode.c_str(), connections, elapsed, static_cast<unsigned long long>(done.load()),
      static_cast<unsigned long long>(errors.load()), static_cast<double>(done.load()) / elapsed,
      static_cast<double>(done.load() * (batch ? records : 1)) / elapsed, percentile(0.5),
      percentile(0.99));
  return errors.load() == 0 ? 0 : 1;
}
