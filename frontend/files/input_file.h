// InputFile: a file a user named as input (a trace program, an npy or safetensors file), opened
// for reading only if it is a regular file.
//
// A FIFO, a device such as /dev/urandom or a directory would make a reader block forever or read
// without end, so open() refuses them with kInvalidArgument "PATH is not a regular file". The
// check is made on the opened descriptor (fstat), and the open itself does not block (a FIFO
// without a writer opens at once), so nothing can swap the file between check and read.
// size() is the size at open; readers validate what a header declares against it before they
// allocate anything.
//
// Errors (messages start with the path):
//   kNotFound         the file does not exist
//   kInvalidArgument  it is not a regular file
//   kIOError          the OS refused to open or read it; a read past the end (the file shrank)
// Ownership: an InputFile owns its descriptor (move-only, closed on destruction).
// Thread-safety: read_at() on one InputFile from several threads is safe (positional reads).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "capture/core/status.h"

namespace tracecache {

class InputFile {
 public:
  static Result<InputFile> open(const std::string& path);

  InputFile(InputFile&& other) noexcept;
  InputFile& operator=(InputFile&& other) noexcept;
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  ~InputFile();

  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }

  // Reads exactly `n` bytes at `offset` into `dst`. kIOError if the OS fails or the file ends
  // first.
  Status read_at(uint64_t offset, void* dst, size_t n) const;
  // The whole file (size() bytes).
  Result<std::string> read_all() const;

 private:
  InputFile(int fd, std::string path, uint64_t size) : fd_(fd), path_(std::move(path)), size_(size) {}

  int fd_ = -1;
  std::string path_;
  uint64_t size_ = 0;
};

}  // namespace tracecache
