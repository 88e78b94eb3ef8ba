#include "replay/audit/json.h"

#include <fmt/format.h>

#include <cmath>

#include "capture/core/text_escape.h"

namespace tracecache::audit {

std::string json_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  append_json_string(out, s);
  return out;
}

void JsonWriter::separate() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!first_.empty()) {
    if (!first_.back()) out_.push_back(',');
    first_.back() = false;
  }
}

JsonWriter& JsonWriter::begin_object() {
  separate();
  out_.push_back('{');
  first_.push_back(true);
  return *this;
}

JsonWriter& JsonWriter::end_object() {
  out_.push_back('}');
  first_.pop_back();
  return *this;
}

JsonWriter& JsonWriter::begin_array() {
  separate();
  out_.push_back('[');
  first_.push_back(true);
  return *this;
}

JsonWriter& JsonWriter::end_array() {
  out_.push_back(']');
  first_.pop_back();
  return *this;
}

JsonWriter& JsonWriter::key(std::string_view k) {
  separate();
  out_ += json_escape(k);
  out_.push_back(':');
  after_key_ = true;
  return *this;
}

JsonWriter& JsonWriter::value(std::string_view s) {
  separate();
  out_ += json_escape(s);
  return *this;
}

JsonWriter& JsonWriter::value(int64_t v) {
  separate();
  out_ += fmt::format("{}", v);
  return *this;
}

JsonWriter& JsonWriter::value(uint64_t v) {
  separate();
  out_ += fmt::format("{}", v);
  return *this;
}

JsonWriter& JsonWriter::value(double v) {
  separate();
  out_ += std::isfinite(v) ? fmt::format("{}", v) : "null";
  return *this;
}

JsonWriter& JsonWriter::value(bool v) {
  separate();
  out_ += v ? "true" : "false";
  return *this;
}

JsonWriter& JsonWriter::null() {
  separate();
  out_ += "null";
  return *this;
}

}  // namespace tracecache::audit
