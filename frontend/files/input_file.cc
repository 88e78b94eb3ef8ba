#include "frontend/files/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <utility>

namespace tracecache {

Result<InputFile> InputFile::open(const std::string& path) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below anyway.
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) return not_found(fmt::format("{}: no such file", path));
    if (err == ENAMETOOLONG) {
      // The name (a program's string, perhaps megabytes) is cut: its start and end say which.
      const std::string shown = path.size() <= 160 ? path
                                : fmt::format("{}...{}", path.substr(0, 100), path.substr(path.size() - 40));
      return invalid_argument(fmt::format("{}: a file name of {} bytes is longer than the system allows (a path of "
                                          "at most {} bytes, each name in it at most {}); pass a shorter path",
                                          shown, path.size(), PATH_MAX, NAME_MAX));
    }
    return io_error(fmt::format("{}: cannot open for reading: {}", path, std::strerror(err)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return io_error(fmt::format("{}: cannot read its status: {}", path, std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    const char* kind = S_ISDIR(st.st_mode)    ? "a directory"
                       : S_ISFIFO(st.st_mode) ? "a FIFO"
                       : S_ISCHR(st.st_mode)  ? "a character device"
                       : S_ISBLK(st.st_mode)  ? "a block device"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "a special file";
    return invalid_argument(
        fmt::format("{} is not a regular file (it is {}); pass the path of a file", path, kind));
  }
  // Regular files never block; clear the flag so reads behave as usual.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return InputFile(fd, path, static_cast<uint64_t>(st.st_size));
}

InputFile::InputFile(InputFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)), size_(other.size_) {}

InputFile& InputFile::operator=(InputFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
    size_ = other.size_;
  }
  return *this;
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

Status InputFile::read_at(uint64_t offset, void* dst, size_t n) const {
  auto* out = static_cast<char*>(dst);
  while (n > 0) {
    ssize_t got = ::pread(fd_, out, n, static_cast<off_t>(offset));
    if (got < 0) {
      if (errno == EINTR) continue;
      return io_error(fmt::format("{}: read failed: {}", path_, std::strerror(errno)));
    }
    if (got == 0) {
      return io_error(fmt::format("{}: the file ended at byte {} while being read (did it change?)",
                                  path_, offset));
    }
    out += got;
    offset += static_cast<uint64_t>(got);
    n -= static_cast<size_t>(got);
  }
  return Status::ok();
}

Result<std::string> InputFile::read_all() const {
  std::string bytes(static_cast<size_t>(size_), '\0');
  Status st = read_at(0, bytes.data(), bytes.size());
  if (!st.is_ok()) return st;
  return bytes;
}

}  // namespace tracecache
