// The server's rate limits (rate_limiter.hpp).
#include "rate_limiter.hpp"

#include <algorithm>
#include <cmath>
#include <string>

namespace abf::server {

RateLimiter::RateLimiter(const RateLimit& limit, std::size_t buckets) : limit_(limit) {
  buckets_.reserve(buckets);
  for (std::size_t i = 0; i < buckets; ++i) buckets_.push_back(std::make_unique<Bucket>());
}

void RateLimiter::refill(Bucket& bucket, std::chrono::steady_clock::time_point now) {
  const double request_cap = limit_.requests_per_second * limit_.burst_seconds;
  const double digest_cap = limit_.digests_per_second * limit_.burst_seconds;
  if (!bucket.started) {
    bucket.started = true;
    bucket.requests = request_cap;
    bucket.digests = digest_cap;
    bucket.last = now;
    return;
  }
  const double seconds = std::chrono::duration<double>(now - bucket.last).count();
  bucket.last = now;
  bucket.requests = std::min(request_cap, bucket.requests + seconds * limit_.requests_per_second);
  bucket.digests = std::min(digest_cap, bucket.digests + seconds * limit_.digests_per_second);
}

RequestResult<void> RateLimiter::admit_request(std::size_t index) {
  if (limit_.requests_per_second <= 0) return {};
  Bucket& bucket = *buckets_[index];
  const std::lock_guard lock(bucket.mutex);
  refill(bucket, std::chrono::steady_clock::now());
  if (bucket.requests >= 1) {
    bucket.requests -= 1;
    return {};
  }
  const double wait = (1 - bucket.requests) / limit_.requests_per_second;
  return refuse(429, "rate_limited",
                "more than " + std::to_string(limit_.requests_per_second) +
                    " requests per second for this token; retry later",
                std::max(1, static_cast<int>(std::ceil(wait))));
}

RequestResult<void> RateLimiter::admit_digests(std::size_t index, std::size_t digests) {
  if (limit_.digests_per_second <= 0) return {};
  Bucket& bucket = *buckets_[index];
  const std::lock_guard lock(bucket.mutex);
  refill(bucket, std::chrono::steady_clock::now());
  if (bucket.digests > 0) {
    bucket.digests -= static_cast<double>(digests);
    return {};
  }
  const double wait = (1 - bucket.digests) / limit_.digests_per_second;
  return refuse(429, "rate_limited",
                "more than " + std::to_string(limit_.digests_per_second) +
                    " digests per second for this token; retry later",
                std::max(1, static_cast<int>(std::ceil(wait))));
}

}  // namespace abf::server
