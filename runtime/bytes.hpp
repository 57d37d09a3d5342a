#pragma once
// An immutable run of bytes that is shared, never copied: the body of an attachment (a tensor,
// a parameter shard). It either owns a std::string it was built from, or views memory kept
// alive by an owner (a received ZeroMQ frame), so a frame travels from the socket to the actor
// that reads it, and from the actor that wrote it to the socket, without a copy in between.
// Copies of a Bytes share the same memory. Thread-safe like a shared_ptr: any thread may hold a
// copy; nobody may write through one.

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace omnilearn::runtime {

class Bytes {
 public:
  Bytes() = default;
  // Takes the string (moved in: no copy of its characters).
  Bytes(std::string text)  // NOLINT(google-explicit-constructor): attachments are built from strings
      : Bytes(std::make_shared<const std::string>(std::move(text))) {}
  explicit Bytes(std::shared_ptr<const std::string> text)
      : owner_(text), data_(text->data()), size_(text->size()) {}
  // `size` bytes at `data`, valid for as long as `owner` lives.
  static Bytes view(std::shared_ptr<const void> owner, const char* data, std::size_t size) {
    Bytes bytes;
    bytes.owner_ = std::move(owner);
    bytes.data_ = data;
    bytes.size_ = size;
    return bytes;
  }

  const char* data() const { return data_; }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::string_view view() const { return {data_ ? data_ : "", size_}; }
  std::string to_string() const { return std::string(view()); }
  // What keeps the bytes alive (for handing them to a socket without a copy).
  const std::shared_ptr<const void>& owner() const { return owner_; }

  friend bool operator==(const Bytes& a, const Bytes& b) { return a.view() == b.view(); }

 private:
  std::shared_ptr<const void> owner_;
  const char* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace omnilearn::runtime
