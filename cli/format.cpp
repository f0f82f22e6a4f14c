// Reports in words and JSON (common.hpp): a filter's or set's summary,
// counts with commas, rates, seconds.
#include "common.hpp"

#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>

namespace abf::cli {

std::string json_text(const nlohmann::ordered_json& json) {
  return json.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

namespace {

// filter_json's keys, and set_json's after them when `as_set`.
nlohmann::ordered_json summary_json(const FilterSummary& s, bool as_set) {
  const auto hex_or_null = [](bool present, const auto& value) {
    return present ? nlohmann::ordered_json(value.hex()) : nlohmann::ordered_json(nullptr);
  };
  nlohmann::ordered_json json;
  json["inserted_item_count"] = s.inserted_item_count;
  json["expected_item_count"] = s.expected_item_count;
  json["target_fpp"] = s.target_fpp;
  json["bit_count"] = s.bit_count;
  json["hash_count"] = s.hash_count;
  json["fill_ratio"] = s.fill_ratio;
  json["estimated_fpp"] = s.estimated_fpp;
  json["catalog_version"] = s.catalog_version;
  json["catalog_id"] = hex_or_null(!s.catalog_id.is_zero(), s.catalog_id);
  json["hash_protocol_version"] = s.hash_protocol_version;
  // The fingerprint names the key without revealing it.
  json["key_fingerprint"] = hex_or_null(s.keyed, s.key_fingerprint);
  json["content_fingerprint"] = s.content_fingerprint
                                    ? nlohmann::ordered_json(s.content_fingerprint->hex())
                                    : nlohmann::ordered_json(nullptr);
  if (as_set) {
    json["shard_count"] = s.shard_count;
    json["shard_expected_item_count"] = s.shard_expected_item_count;
    json["shard_bit_count"] = s.shard_bit_count;
  }
  return json;
}

// filter_text after its layout: "fill 0.5, estimated false-positive rate ...".
void append_summary_text(std::ostringstream& out, const FilterSummary& s) {
  out << ", fill " << s.fill_ratio << ", estimated false-positive rate " << s.estimated_fpp
      << ", catalog version " << s.catalog_version << ", catalog id "
      << (s.catalog_id.is_zero() ? "none" : s.catalog_id.hex()) << ", hash protocol "
      << s.hash_protocol_version;
  if (s.keyed) out << " (key " << s.key_fingerprint.hex() << ")";
  out << ", content fingerprint "
      << (s.content_fingerprint ? s.content_fingerprint->hex() : "none");
}

}  // namespace

nlohmann::ordered_json filter_json(const Filter& filter) {
  return summary_json(summarize(filter), false);
}

std::string filter_text(const Filter& filter) {
  const FilterSummary s = summarize(filter);
  std::ostringstream out;
  out << "m = " << with_commas(s.bit_count) << " bits, k = " << s.hash_count;
  append_summary_text(out, s);
  return out.str();
}

nlohmann::ordered_json set_json(const FilterSet& set) { return summary_json(summarize(set), true); }

std::string set_text(const FilterSet& set) {
  const FilterSummary s = summarize(set);
  std::ostringstream out;
  out << s.shard_count << (s.shard_count == 1 ? " shard" : " shards")
      << " of m = " << with_commas(s.shard_bit_count)
      << " bits (n_i = " << with_commas(s.shard_expected_item_count)
      << " each), k = " << s.hash_count;
  append_summary_text(out, s);
  return out.str();
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string with_commas(std::uint64_t value) {
  std::string digits = std::to_string(value);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string counted(std::uint64_t count, std::string_view noun) {
  return with_commas(count) + " " + std::string(noun) + (count == 1 ? "" : "s");
}

std::string si_rate(double per_second) {
  char text[32];
  if (per_second >= 1e9) {
    std::snprintf(text, sizeof text, "%.2f G/s", per_second / 1e9);
  } else if (per_second >= 1e6) {
    std::snprintf(text, sizeof text, "%.2f M/s", per_second / 1e6);
  } else if (per_second >= 1e3) {
    std::snprintf(text, sizeof text, "%.2f k/s", per_second / 1e3);
  } else {
    std::snprintf(text, sizeof text, "%.0f /s", per_second);
  }
  return text;
}

}  // namespace abf::cli
