// torchneuron's native PrivateUse1 hooks: pinned host memory.
//
// Why C++: PyTorch asks the PrivateUse1 hooks for a C++ `at::Allocator*` when a
// CPU tensor is pinned (`Tensor.pin_memory()`, `torch.empty(..., pin_memory=True)`,
// DataLoader's pin thread, DDP's reducer), and the hooks object that Python can
// register (`torch._C._acc.PrivateUse1Hooks`) cannot provide one: its
// getPinnedMemoryAllocator() always raises.  This file is the smallest hooks
// object that can: the same answers as the Python hooks, plus a host allocator
// whose blocks `is_pinned()` recognises.  It is compiled against the installed
// torch's headers on first use (torchneuron/native/__init__.py).
#include <ATen/detail/CUDAHooksInterface.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/Allocator.h>
#include <c10/core/StorageImpl.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

namespace {

using AvailableFn = int (*)();
AvailableFn g_available = nullptr;

std::mutex g_mutex;
std::map<const char*, size_t> g_blocks;  // start -> bytes, for is_pinned()
size_t g_bytes = 0;
size_t g_count = 0;

constexpr size_t kAlign = 4096;  // page-aligned, like cudaHostAlloc

void host_free(void* p) {
  if (p == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = g_blocks.find(static_cast<const char*>(p));
    if (it != g_blocks.end()) {
      g_bytes -= it->second;
      g_count -= 1;
      g_blocks.erase(it);
    }
  }
  std::free(p);
}

struct HostAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t n) override {
    void* p = nullptr;
    if (n != 0) {
      if (posix_memalign(&p, kAlign, n) != 0 || p == nullptr) {
        TORCH_CHECK_WITH(OutOfMemoryError, false,
                         "torchneuron: could not allocate ", n, " bytes of pinned host memory");
      }
      std::lock_guard<std::mutex> lock(g_mutex);
      g_blocks.emplace(static_cast<const char*>(p), n);
      g_bytes += n;
      g_count += 1;
    }
    return {p, p, &host_free, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &host_free; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
};

HostAllocator g_allocator;

struct Hooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return g_available != nullptr && g_available() != 0; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  bool isPinnedPtr(const void* data) const override {
    const char* p = static_cast<const char*>(data);
    {
      std::lock_guard<std::mutex> lock(g_mutex);
      auto it = g_blocks.upper_bound(p);
      if (it != g_blocks.begin()) {
        --it;
        if (p == it->first || p < it->first + it->second) return true;
      }
    }
    // With a CUDA build on a GPU machine, factories (torch.empty(..., pin_memory=True))
    // take CUDA's pinned allocator before the accelerator's: recognise those blocks too.
    const auto& cuda = at::detail::getCUDAHooks();
    return cuda.hasCUDA() && cuda.isPinnedPtr(data);
  }
  at::Allocator* getPinnedMemoryAllocator() const override { return &g_allocator; }
};

}  // namespace

extern "C" {

// 1: registered; 0: PrivateUse1 hooks were already registered (by someone else).
int tn_register_hooks(AvailableFn available) {
  if (at::isPrivateUse1HooksRegistered()) return 0;
  g_available = available;
  at::RegisterPrivateUse1HooksInterface(new Hooks());
  return 1;
}

// Live pinned blocks and their bytes (torch.neuron.host_memory_stats()).
void tn_host_stats(size_t* count, size_t* bytes) {
  std::lock_guard<std::mutex> lock(g_mutex);
  *count = g_count;
  *bytes = g_bytes;
}

// UntypedStorage.resize_ of a neuron storage: point the StorageImpl at a new (fake)
// device address of a new size, in place, so every tensor over it sees the change
// (FSDP2 frees and refills parameter storage so).  torchneuron's fake addresses have
// no deleter: the device buffer lives in the Python cell, replaced by the caller.
int tn_storage_set(void* impl, void* addr, size_t nbytes, int index) {
  auto* s = static_cast<c10::StorageImpl*>(impl);
  c10::Device dev(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(index));
  if (s->device() != dev) return 0;
  s->set_data_ptr_noswap(c10::DataPtr(addr, dev));
  s->set_nbytes(nbytes);
  return 1;
}

}  // extern "C"
