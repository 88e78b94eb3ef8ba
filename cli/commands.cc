#include "cli/commands.h"

#include <charconv>
#include <filesystem>

#include "cli/common.h"
#include "replay/audit/audit.h"

namespace tracecache::cli {

std::string escape_control_bytes(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if ((byte < 0x20 && c != '\n' && c != '\t') || byte == 0x7f) {
      out += fmt::format("\\x{:02x}", byte);
    } else {
      out += c;
    }
  }
  return out;
}

int report_error(const Status& status) {
  std::fputs(fmt::format("tracecache: {}\n", escape_control_bytes(status.message())).c_str(), stderr);
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kNotFound:
    case StatusCode::kParseError:
    case StatusCode::kUnsupported:
      return kExitBadInput;
    default:
      return kExitFailure;
  }
}

Result<uint64_t> parse_byte_size(std::string_view text) {
  uint64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  std::string_view suffix(end, static_cast<size_t>(text.data() + text.size() - end));
  int shift = suffix.empty() ? 0 : suffix == "K" || suffix == "k" ? 10 : suffix == "M" ? 20
                              : suffix == "G" ? 30 : -1;
  if (ec != std::errc() || end == text.data() || shift < 0 || value > (UINT64_MAX >> shift)) {
    return invalid_argument(fmt::format("'{}' is not a byte size (examples: 1048576, 64K, 10M, 2G)", text));
  }
  return value << shift;
}

Status check_db_flag_directory(std::string_view flag) {
  if (flag.empty()) return Status::ok();
  const std::filesystem::path parent = std::filesystem::path(flag).parent_path();
  std::error_code ec;
  if (parent.empty() || std::filesystem::is_directory(parent, ec)) return Status::ok();
  return invalid_argument(fmt::format("--db {}: the directory '{}' does not exist (create it first, or pass a path in "
                                      "an existing directory)", flag, parent.string()));
}

Result<std::unique_ptr<store::CacheDb>> open_existing_db(const DbOptions& db) {
  return audit::open_existing_db(db.path());
}

}  // namespace tracecache::cli
