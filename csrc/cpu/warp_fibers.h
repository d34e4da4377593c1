// The warps of one unit as fibers (ucontext), for the host emulation of the CUDA kernels. Each
// warp runs the march until it reaches a barrier, then hands over; when every warp of the unit is
// at the barrier they go on. Between two barriers the warps run one after the other, in an order
// that changes at every barrier (forward from a rotating start, then backward), and shared memory
// starts as NaN: a warp that reads another's shared memory without a barrier in between then
// reads a value from the wrong plane, or NaN, and the result is wrong, as it would be on a GPU
// whose warps happened to run in that order.
#pragma once

#include <ucontext.h>

#include <c10/util/Exception.h>

#include <functional>
#include <memory>
#include <vector>

namespace segnet {

class WarpFibers {
 public:
  // Runs body(warp, wait_at_barrier) for warps 0 .. count - 1 until all of them return.
  void run(int count, const std::function<void(int, const std::function<void()>&)>& body) {
    body_ = &body;
    fibers_.resize(count);
    for (int w = 0; w < count; ++w) start(w);
    for (int phase = 0;; ++phase) {
      for (int w : order(count, phase)) {
        if (!fibers_[w].done) switch_to(w);
      }
      int done = 0;
      for (int w = 0; w < count; ++w) done += fibers_[w].done;
      if (done == count) return;
      TORCH_CHECK(done == 0, "host emulation: ", done, " of ", count,
                  " warps of a unit returned while the others wait at a barrier (a GPU would hang)");
    }
  }

 private:
  static constexpr size_t kStackBytes = 1 << 18;
  struct Fiber {
    ucontext_t context;
    std::unique_ptr<char[]> stack;
    bool done = false;
  };

  static std::vector<int> order(int count, int phase) {
    std::vector<int> warps(count);
    const int start = (phase * 5) % count;
    for (int i = 0; i < count; ++i) {
      const int k = phase % 2 == 0 ? i : count - 1 - i;
      warps[i] = (start + k) % count;
    }
    return warps;
  }

  void start(int w) {
    Fiber& f = fibers_[w];
    if (!f.stack) f.stack.reset(new char[kStackBytes]);
    f.done = false;
    getcontext(&f.context);
    f.context.uc_stack.ss_sp = f.stack.get();
    f.context.uc_stack.ss_size = kStackBytes;
    f.context.uc_link = &scheduler_;
    current_ = this;
    makecontext(&f.context, reinterpret_cast<void (*)()>(&WarpFibers::entry), 1, w);  // makecontext passes int arguments
  }

  static void entry(int w) {
    WarpFibers* self = current_;
    const std::function<void()> wait = [self, w] { swapcontext(&self->fibers_[w].context, &self->scheduler_); };
    (*self->body_)(w, wait);
    self->fibers_[w].done = true;  // uc_link returns to the scheduler
  }

  void switch_to(int w) {
    current_ = this;
    swapcontext(&scheduler_, &fibers_[w].context);
  }

  static thread_local WarpFibers* current_;
  const std::function<void(int, const std::function<void()>&)>* body_ = nullptr;
  std::vector<Fiber> fibers_;
  ucontext_t scheduler_;
};

inline thread_local WarpFibers* WarpFibers::current_ = nullptr;

}  // namespace segnet
