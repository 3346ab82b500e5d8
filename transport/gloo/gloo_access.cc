// The narrow bridge into Gloo's TCP transport internals (see gloo_internal.h for why).
//
// C++ lets a class derived from B name B's protected members when it forms a pointer to member;
// the resulting pointer can then be applied to any B object. The accessor structs below are
// never instantiated: they only exist to form those pointers. Everything touched is declared in
// the installed /usr/include/gloo/transport/tcp headers of the Debian package kolo builds
// against, and is used exactly as Gloo itself uses it (the buffer's mutex guards its counters
// and exception; signalException is what Gloo calls from a user thread after a timeout).
#include <gloo/transport/tcp/context.h>
#include <gloo/transport/tcp/pair.h>
#include <gloo/transport/tcp/unbound_buffer.h>

#include <cstring>

#include "transport/gloo/gloo_internal.h"

namespace kolo::gloo_detail {
namespace {

using TcpBuffer = gloo::transport::tcp::UnboundBuffer;
using TcpContext = gloo::transport::tcp::Context;

struct BufferAccess : TcpBuffer {
  static BufferState peek(TcpBuffer* b, bool recv, std::exception_ptr* error) {
    std::lock_guard<std::mutex> lock(b->*(&BufferAccess::m_));
    const int completions =
        recv ? b->*(&BufferAccess::recvCompletions_) : b->*(&BufferAccess::sendCompletions_);
    if (completions > 0) return BufferState::kDone;
    const std::exception_ptr& ex = b->*(&BufferAccess::ex_);
    if (ex != nullptr) {
      *error = ex;
      return BufferState::kFailed;
    }
    return BufferState::kPending;
  }
};

struct PairAccess : gloo::transport::tcp::Pair {
  static std::string peer(gloo::transport::tcp::Pair* p) {
    return (p->*(&PairAccess::peer_)).str();
  }
};

struct ContextAccess : TcpContext {
  static void signal(TcpContext* c, const std::string& message) {
    (c->*(&ContextAccess::signalException))(message);
  }
};

}  // namespace

BufferState peekBuffer(gloo::transport::UnboundBuffer* buffer, bool recv,
                       std::exception_ptr* error) {
  // kolo creates every device with gloo::transport::tcp::CreateDevice, so every buffer is a
  // tcp::UnboundBuffer.
  return BufferAccess::peek(static_cast<TcpBuffer*>(buffer), recv, error);
}

void GlooContext::fail(const std::string& message) {
  auto tcp = std::dynamic_pointer_cast<TcpContext>(transportContext_);
  if (tcp) ContextAccess::signal(tcp.get(), message);
}

std::string peerAddress(gloo::rendezvous::Context& context, int rank) {
  if (rank < 0 || rank >= context.size || rank == context.rank) return "";
  try {
    auto* pair = dynamic_cast<gloo::transport::tcp::Pair*>(context.getPair(rank).get());
    return pair == nullptr ? "" : PairAccess::peer(pair);
  } catch (const std::exception&) {
    return "";
  }
}

std::string glooMessage(const std::exception& e) {
  std::string text = e.what();
  // Gloo prefixes "[file:line] "; the location means nothing to a kolo user.
  if (!text.empty() && text[0] == '[') {
    size_t close = text.find("] ");
    if (close != std::string::npos) text = text.substr(close + 2);
  }
  return text;
}

}  // namespace kolo::gloo_detail
