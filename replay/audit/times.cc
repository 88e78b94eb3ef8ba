#include "replay/audit/times.h"

#include <fmt/format.h>

#include <charconv>
#include <chrono>
#include <cstdint>
#include <ctime>

namespace tracecache::audit {

Result<double> parse_age(std::string_view text) {
  double unit = 1;
  std::string_view digits = text;
  if (!text.empty()) {
    switch (text.back()) {
      case 's': unit = 1; break;
      case 'm': unit = 60; break;
      case 'h': unit = 3600; break;
      case 'd': unit = 86400; break;
      default: unit = 0; break;
    }
    if (unit != 0) digits.remove_suffix(1);
    if (unit == 0) unit = 1;
  }
  uint64_t n = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size()) {
    return invalid_argument(fmt::format("'{}' is not an age (examples: 3600, 90m, 12h, 30d)", text));
  }
  return static_cast<double>(n) * unit;
}

// `audit --since`: "2026-11-23", "2026-11-23 10:00[:30]", "2026-11-23T10:00[:30][Z]" (UTC), or an
// age before now ("30s", "10m", "2h", "1d") -> Unix time.
Result<double> parse_since(std::string_view text) {
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  if (!text.empty() && text.back() != 'Z' && text.find('-') == std::string_view::npos) {
    Result<double> age = parse_age(text);
    if (age.is_ok()) return now - *age;
  }
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0;
  std::string_view rest = text;
  if (rest.ends_with('Z')) rest.remove_suffix(1);
  auto number = [&rest](int digits, int* out) {
    if (rest.size() < static_cast<size_t>(digits)) return false;
    auto [end, ec] = std::from_chars(rest.data(), rest.data() + digits, *out);
    if (ec != std::errc() || end != rest.data() + digits) return false;
    rest.remove_prefix(static_cast<size_t>(digits));
    return true;
  };
  auto sep = [&rest](std::string_view chars) {
    if (rest.empty() || chars.find(rest.front()) == std::string_view::npos) return false;
    rest.remove_prefix(1);
    return true;
  };
  bool ok = number(4, &year) && sep("-") && number(2, &month) && sep("-") && number(2, &day);
  if (ok && !rest.empty()) ok = sep("T ") && number(2, &hour) && sep(":") && number(2, &minute);
  if (ok && !rest.empty()) ok = sep(":") && number(2, &second);
  ok = ok && rest.empty() && month >= 1 && month <= 12 && day >= 1 && day <= 31 && hour <= 23 && minute <= 59 &&
       second <= 60;
  if (!ok) {
    return invalid_argument(fmt::format("--since '{}' is not a time: give an ISO date or date and time in UTC "
                                        "(2026-11-23, 2026-11-23T10:00) or an age (30s, 10m, 2h, 1d)", text));
  }
  const std::chrono::year_month_day date(std::chrono::year(year), std::chrono::month(static_cast<unsigned>(month)),
                                         std::chrono::day(static_cast<unsigned>(day)));
  if (!date.ok()) return invalid_argument(fmt::format("--since '{}': no such date", text));
  const std::chrono::sys_days days(date);
  return static_cast<double>(days.time_since_epoch().count()) * 86400.0 + hour * 3600.0 + minute * 60.0 + second;
}

std::string format_time(double unix_seconds) {
  // Times come from the (untrusted) database: anything outside years 1970..9999 prints as "-".
  if (!(unix_seconds > 0 && unix_seconds <= 253402300799.0)) return "-";
  std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  if (gmtime_r(&t, &tm) == nullptr) return "-";
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

}  // namespace tracecache::audit
