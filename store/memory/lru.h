// LruCache: the in-memory cache in front of the SQLite store.
//
// Maps keys to shared, immutable values. Values are handed out as shared_ptr<const V>, so
// evicting an entry while a caller still runs it cannot free it (the PyTorch lazy core's
// design). Capacity is a byte budget; each entry states its size. Eviction is least recently
// used first. Not thread-safe: one owner (the runtime) uses it from one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tracecache::store {

template <typename K, typename V, typename Hash = std::hash<K>>
class LruCache {
 public:
  explicit LruCache(uint64_t capacity_bytes) : capacity_(capacity_bytes) {}

  // The value for `key`, marked most recently used; nullptr if absent.
  std::shared_ptr<const V> get(const K& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    order_.splice(order_.begin(), order_, it->second);
    return it->second->value;
  }

  // Inserts or replaces; then evicts least recently used entries (never the new one) while over
  // capacity. Returns the keys it evicted.
  std::vector<K> put(const K& key, std::shared_ptr<const V> value, uint64_t bytes) {
    erase(key);
    order_.push_front(Entry{key, std::move(value), bytes});
    index_.emplace(key, order_.begin());
    bytes_ += bytes;
    std::vector<K> evicted;
    while (bytes_ > capacity_ && order_.size() > 1) {
      Entry& last = order_.back();
      evicted.push_back(last.key);
      bytes_ -= last.bytes;
      index_.erase(last.key);
      order_.pop_back();
    }
    return evicted;
  }

  bool erase(const K& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return false;
    bytes_ -= it->second->bytes;
    order_.erase(it->second);
    index_.erase(it);
    return true;
  }

  size_t size() const { return index_.size(); }
  uint64_t bytes() const { return bytes_; }
  uint64_t capacity() const { return capacity_; }

 private:
  struct Entry {
    K key;
    std::shared_ptr<const V> value;
    uint64_t bytes;
  };
  uint64_t capacity_;
  uint64_t bytes_ = 0;
  std::list<Entry> order_;  // most recently used first
  std::unordered_map<K, typename std::list<Entry>::iterator, Hash> index_;
};

}  // namespace tracecache::store
