"""A PyTorch user's smallest real job, for a guest under TCG (seconds of
GPU work, minutes of emulated CPU): a training loop of a small MLP, then
a batch-1 greedy generation of a GPT-2 built from a config with random
weights.  Prints one line per result, and how long each phase took, for
tests/gpu/test_gpu_vm.py to compare with a native run."""
import sys
import time

t0 = time.monotonic()
print("importing torch", flush=True)
import torch  # noqa: E402

print(f"time import-torch {time.monotonic() - t0:.1f} s", flush=True)
torch.manual_seed(0)
dev = torch.device("cuda")
print(f"device {torch.cuda.get_device_name(0)}", flush=True)

t0 = time.monotonic()
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                            torch.nn.Linear(128, 10)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
X = torch.randn(256, 64, device=dev)
Y = torch.randint(0, 10, (256,), device=dev)
for step in range(10):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(X), Y)
    loss.backward()
    opt.step()
    print(f"loss {step} {loss.item():.9e}", flush=True)
print(f"time train {time.monotonic() - t0:.1f} s", flush=True)

if "--no-generate" in sys.argv:
    sys.exit(0)
t0 = time.monotonic()
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

print(f"time import-transformers {time.monotonic() - t0:.1f} s", flush=True)
t0 = time.monotonic()
torch.manual_seed(0)
config = GPT2Config(vocab_size=512, n_positions=64, n_embd=128, n_layer=2,
                    n_head=4)
gpt = GPT2LMHeadModel(config).to(dev).eval()
prompt = torch.tensor([[1, 2, 3, 4]], device=dev)
with torch.no_grad():
    out = gpt.generate(prompt, max_new_tokens=16, do_sample=False,
                       pad_token_id=0)
print("tokens " + " ".join(str(t) for t in out[0].tolist()), flush=True)
print(f"time generate {time.monotonic() - t0:.1f} s", flush=True)
print("PASS", flush=True)
