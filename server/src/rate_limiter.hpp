// The server's rate limits: token buckets per caller. Internal.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "abf/server/config.hpp"
#include "abf/server/request.hpp"

namespace abf::server {

// A token bucket pair (requests, digests) per caller.
class RateLimiter {
 public:
  RateLimiter(const RateLimit& limit, std::size_t buckets);
  // Takes one request token; 429 with Retry-After when the bucket is empty.
  RequestResult<void> admit_request(std::size_t bucket);
  // Takes `digests` digest tokens (the bucket may go into debt by one
  // request); 429 when it is already in debt.
  RequestResult<void> admit_digests(std::size_t bucket, std::size_t digests);

 private:
  struct Bucket {
    std::mutex mutex;
    double requests = 0;
    double digests = 0;
    std::chrono::steady_clock::time_point last{};
    bool started = false;
  };
  void refill(Bucket& bucket, std::chrono::steady_clock::time_point now);
  RateLimit limit_;
  std::vector<std::unique_ptr<Bucket>> buckets_;
};

}  // namespace abf::server
