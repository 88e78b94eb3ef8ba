#include "store/sqlite/fault_vfs.h"

#include <sqlite3.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include <fmt/format.h>

namespace tracecache::store {

namespace {

class FaultVfsImpl;

// An open file: our header, then the real VFS's file object (szOsFile bytes) right after it.
struct FaultFile {
  sqlite3_file base;  // must be first: SQLite passes sqlite3_file*
  FaultVfsImpl* owner;
  sqlite3_file* real;
};

class FaultVfsImpl final : public FaultVfs {
 public:
  FaultVfsImpl(std::string name, sqlite3_vfs* real) : name_(std::move(name)), real_(real) {
    std::memset(&vfs_, 0, sizeof vfs_);
    vfs_.iVersion = 1;
    vfs_.szOsFile = static_cast<int>(sizeof(FaultFile)) + real->szOsFile;
    vfs_.mxPathname = real->mxPathname;
    vfs_.zName = name_.c_str();
    vfs_.pAppData = this;
    vfs_.xOpen = &FaultVfsImpl::open;
    vfs_.xDelete = [](sqlite3_vfs* v, const char* n, int s) { return self(v)->real_->xDelete(self(v)->real_, n, s); };
    vfs_.xAccess = [](sqlite3_vfs* v, const char* n, int f, int* out) {
      return self(v)->real_->xAccess(self(v)->real_, n, f, out);
    };
    vfs_.xFullPathname = [](sqlite3_vfs* v, const char* n, int size, char* out) {
      return self(v)->real_->xFullPathname(self(v)->real_, n, size, out);
    };
    vfs_.xDlOpen = [](sqlite3_vfs* v, const char* n) { return self(v)->real_->xDlOpen(self(v)->real_, n); };
    vfs_.xDlError = [](sqlite3_vfs* v, int n, char* m) { self(v)->real_->xDlError(self(v)->real_, n, m); };
    vfs_.xDlSym = [](sqlite3_vfs* v, void* h, const char* s) { return self(v)->real_->xDlSym(self(v)->real_, h, s); };
    vfs_.xDlClose = [](sqlite3_vfs* v, void* h) { self(v)->real_->xDlClose(self(v)->real_, h); };
    vfs_.xRandomness = [](sqlite3_vfs* v, int n, char* out) {
      return self(v)->real_->xRandomness(self(v)->real_, n, out);
    };
    vfs_.xSleep = [](sqlite3_vfs* v, int us) { return self(v)->real_->xSleep(self(v)->real_, us); };
    vfs_.xCurrentTime = [](sqlite3_vfs* v, double* t) { return self(v)->real_->xCurrentTime(self(v)->real_, t); };
    vfs_.xGetLastError = [](sqlite3_vfs* v, int n, char* m) {
      return self(v)->real_->xGetLastError ? self(v)->real_->xGetLastError(self(v)->real_, n, m) : 0;
    };
  }

  sqlite3_vfs* vfs() { return &vfs_; }

  void set_plan(const FaultPlan& plan) override {
    full_at_write_ = plan.full_at_write;
    fail_sync_at_ = plan.fail_sync_at;
    fail_read_at_ = plan.fail_read_at;
    crash_at_write_ = plan.crash_at_write;
    writes_ = 0;
    syncs_ = 0;
    reads_ = 0;
  }
  int64_t writes() const override { return writes_; }
  int64_t syncs() const override { return syncs_; }
  int64_t reads() const override { return reads_; }
  const std::string& name() const override { return name_; }

  // The fault for the next write, read or sync (SQLITE_OK: none).
  int on_write() {
    int64_t n = writes_++;
    if (crash_at_write_ >= 0 && n >= crash_at_write_) ::_exit(kFaultCrashExit);
    return full_at_write_ >= 0 && n >= full_at_write_ ? SQLITE_FULL : SQLITE_OK;
  }
  int on_sync() {
    int64_t n = syncs_++;
    return fail_sync_at_ >= 0 && n >= fail_sync_at_ ? SQLITE_IOERR_FSYNC : SQLITE_OK;
  }
  int on_read() {
    int64_t n = reads_++;
    return fail_read_at_ >= 0 && n >= fail_read_at_ ? SQLITE_IOERR_READ : SQLITE_OK;
  }

 private:
  static FaultVfsImpl* self(sqlite3_vfs* v) { return static_cast<FaultVfsImpl*>(v->pAppData); }
  static FaultFile* file(sqlite3_file* f) { return reinterpret_cast<FaultFile*>(f); }
  static sqlite3_file* real(sqlite3_file* f) { return file(f)->real; }

  static int open(sqlite3_vfs* v, const char* name, sqlite3_file* f, int flags, int* out_flags) {
    FaultVfsImpl* me = self(v);
    FaultFile* ff = file(f);
    ff->owner = me;
    ff->real = reinterpret_cast<sqlite3_file*>(ff + 1);
    ff->base.pMethods = nullptr;
    int rc = me->real_->xOpen(me->real_, name, ff->real, flags, out_flags);
    if (rc != SQLITE_OK || ff->real->pMethods == nullptr) return rc;
    ff->base.pMethods = me->methods_for(ff->real->pMethods);
    return SQLITE_OK;
  }

  // One io_methods table per real table (its version decides which entries exist).
  const sqlite3_io_methods* methods_for(const sqlite3_io_methods* r) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = methods_.find(r);
    if (it != methods_.end()) return it->second.get();
    auto m = std::make_unique<sqlite3_io_methods>();
    std::memset(m.get(), 0, sizeof *m);
    m->iVersion = r->iVersion;
    m->xClose = [](sqlite3_file* f) { return real(f)->pMethods->xClose(real(f)); };
    m->xRead = [](sqlite3_file* f, void* buf, int n, sqlite3_int64 off) {
      int rc = file(f)->owner->on_read();
      return rc != SQLITE_OK ? rc : real(f)->pMethods->xRead(real(f), buf, n, off);
    };
    m->xWrite = [](sqlite3_file* f, const void* buf, int n, sqlite3_int64 off) {
      int rc = file(f)->owner->on_write();
      return rc != SQLITE_OK ? rc : real(f)->pMethods->xWrite(real(f), buf, n, off);
    };
    m->xTruncate = [](sqlite3_file* f, sqlite3_int64 size) { return real(f)->pMethods->xTruncate(real(f), size); };
    m->xSync = [](sqlite3_file* f, int flags) {
      int rc = file(f)->owner->on_sync();
      return rc != SQLITE_OK ? rc : real(f)->pMethods->xSync(real(f), flags);
    };
    m->xFileSize = [](sqlite3_file* f, sqlite3_int64* size) { return real(f)->pMethods->xFileSize(real(f), size); };
    m->xLock = [](sqlite3_file* f, int l) { return real(f)->pMethods->xLock(real(f), l); };
    m->xUnlock = [](sqlite3_file* f, int l) { return real(f)->pMethods->xUnlock(real(f), l); };
    m->xCheckReservedLock = [](sqlite3_file* f, int* out) {
      return real(f)->pMethods->xCheckReservedLock(real(f), out);
    };
    m->xFileControl = [](sqlite3_file* f, int op, void* arg) {
      return real(f)->pMethods->xFileControl(real(f), op, arg);
    };
    m->xSectorSize = [](sqlite3_file* f) { return real(f)->pMethods->xSectorSize(real(f)); };
    m->xDeviceCharacteristics = [](sqlite3_file* f) { return real(f)->pMethods->xDeviceCharacteristics(real(f)); };
    if (r->iVersion >= 2) {
      m->xShmMap = [](sqlite3_file* f, int pg, int sz, int extend, void volatile** out) {
        return real(f)->pMethods->xShmMap(real(f), pg, sz, extend, out);
      };
      m->xShmLock = [](sqlite3_file* f, int off, int n, int flags) {
        return real(f)->pMethods->xShmLock(real(f), off, n, flags);
      };
      m->xShmBarrier = [](sqlite3_file* f) { real(f)->pMethods->xShmBarrier(real(f)); };
      m->xShmUnmap = [](sqlite3_file* f, int del) { return real(f)->pMethods->xShmUnmap(real(f), del); };
    }
    if (r->iVersion >= 3) {
      m->xFetch = [](sqlite3_file* f, sqlite3_int64 off, int n, void** out) {
        return real(f)->pMethods->xFetch(real(f), off, n, out);
      };
      m->xUnfetch = [](sqlite3_file* f, sqlite3_int64 off, void* p) {
        return real(f)->pMethods->xUnfetch(real(f), off, p);
      };
    }
    const sqlite3_io_methods* out = m.get();
    methods_.emplace(r, std::move(m));
    return out;
  }

  std::string name_;
  sqlite3_vfs* real_;
  sqlite3_vfs vfs_;
  std::atomic<int64_t> full_at_write_{-1}, fail_sync_at_{-1}, fail_read_at_{-1}, crash_at_write_{-1};
  std::atomic<int64_t> writes_{0}, syncs_{0}, reads_{0};
  std::mutex mu_;
  std::map<const sqlite3_io_methods*, std::unique_ptr<sqlite3_io_methods>> methods_;
};

}  // namespace

Result<FaultVfs*> register_fault_vfs(const std::string& name) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<FaultVfsImpl>>* registry =
      new std::map<std::string, std::unique_ptr<FaultVfsImpl>>();  // lives as long as SQLite's pointers
  std::lock_guard<std::mutex> lock(mu);
  auto it = registry->find(name);
  if (it != registry->end()) return static_cast<FaultVfs*>(it->second.get());
  if (sqlite3_initialize() != SQLITE_OK) return internal_error("sqlite3_initialize failed");
  sqlite3_vfs* real = sqlite3_vfs_find(nullptr);
  if (!real) return internal_error("SQLite has no default VFS");
  if (sqlite3_vfs_find(name.c_str())) {
    return invalid_argument(fmt::format("a VFS named '{}' is already registered", name));
  }
  auto impl = std::make_unique<FaultVfsImpl>(name, real);
  int rc = sqlite3_vfs_register(impl->vfs(), /*makeDflt=*/0);
  if (rc != SQLITE_OK) return internal_error(fmt::format("registering VFS '{}': {}", name, sqlite3_errstr(rc)));
  FaultVfs* out = impl.get();
  registry->emplace(name, std::move(impl));
  return out;
}

}  // namespace tracecache::store
