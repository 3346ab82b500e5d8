// Stand-in for gloo/common/memory.h, which Debian's libgloo-dev (0.0~git20220518) omits although
// its gloo/transport/tcp/*.h headers include it. Only transport/gloo/gloo_access.cc sees this
// directory, and only when the system header is missing (transport/gloo/CMakeLists.txt).
//
// The three types below are the ones those headers name, with the same shape as Gloo's own: a
// root reference to an object that hands out weak references, and short-lived strong ones that
// keep the object alive while the I/O thread uses it. kolo never constructs them; the tcp
// classes that embed them are created by libgloo itself, so only the declarations must match.
#pragma once

#include <memory>
#include <thread>

namespace gloo {

template <typename T>
class WeakNonOwningPtr;
template <typename T>
class ShareableNonOwningPtr;

template <typename T>
class NonOwningPtr final {
 public:
  NonOwningPtr() = default;
  explicit NonOwningPtr(const WeakNonOwningPtr<T>& weak) : ptr_(weak.ptr_.lock()) {}
  T* operator->() const noexcept { return ptr_.get(); }
  explicit operator bool() const noexcept { return static_cast<bool>(ptr_); }

 private:
  std::shared_ptr<T> ptr_;
};

template <typename T>
class WeakNonOwningPtr final {
 public:
  WeakNonOwningPtr() = default;
  explicit WeakNonOwningPtr(const ShareableNonOwningPtr<T>& root) : ptr_(root.ptr_) {}

 private:
  std::weak_ptr<T> ptr_;
  friend class NonOwningPtr<T>;
};

template <typename T>
class ShareableNonOwningPtr final {
 public:
  explicit ShareableNonOwningPtr(T* object) : ptr_(object, [](T*) {}) {}
  ShareableNonOwningPtr(const ShareableNonOwningPtr&) = delete;
  ShareableNonOwningPtr& operator=(const ShareableNonOwningPtr&) = delete;
  // Blocks until no strong reference handed out through a WeakNonOwningPtr remains.
  ~ShareableNonOwningPtr() {
    std::weak_ptr<T> watch(ptr_);
    ptr_.reset();
    while (!watch.expired()) std::this_thread::yield();
  }

 private:
  std::shared_ptr<T> ptr_;
  friend class WeakNonOwningPtr<T>;
};

}  // namespace gloo
