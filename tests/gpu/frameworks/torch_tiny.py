"""A PyTorch user's smallest real job, for a guest under TCG (seconds of
GPU work, minutes of emulated CPU): a training loop of a small MLP, then
a batch-1 greedy generation of a small GPT-style decoder built from a
config with random weights.  Prints one line per result, and how long
each phase took, for tests/gpu/test_gpu_vm.py to compare with a native
run."""
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

t0 = time.monotonic()
# A GPT-style decoder from a config, random weights, in torch.nn alone:
# importing transformers is minutes more of emulated CPU in a TCG guest.
CONFIG = {"vocab": 512, "positions": 64, "width": 128, "layers": 2, "heads": 4}


class TinyGPT(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.tok = torch.nn.Embedding(c["vocab"], c["width"])
        self.pos = torch.nn.Embedding(c["positions"], c["width"])
        layer = torch.nn.TransformerEncoderLayer(c["width"], c["heads"], 4 * c["width"],
                                                 dropout=0.0, batch_first=True,
                                                 norm_first=True)
        self.blocks = torch.nn.TransformerEncoder(layer, c["layers"],
                                                  enable_nested_tensor=False)
        self.head = torch.nn.Linear(c["width"], c["vocab"], bias=False)

    def forward(self, ids):
        n = ids.shape[1]
        x = self.tok(ids) + self.pos(torch.arange(n, device=ids.device))
        causal = torch.nn.Transformer.generate_square_subsequent_mask(n, device=ids.device)
        return self.head(self.blocks(x, mask=causal, is_causal=True))


torch.manual_seed(0)
gpt = TinyGPT(CONFIG).to(dev).eval()
ids = torch.tensor([[1, 2, 3, 4]], device=dev)
with torch.no_grad():
    for _ in range(16):            # batch 1, greedy
        nxt = gpt(ids)[:, -1].argmax(-1, keepdim=True)
        ids = torch.cat([ids, nxt], dim=1)
print("tokens " + " ".join(str(t) for t in ids[0].tolist()), flush=True)
print(f"time generate {time.monotonic() - t0:.1f} s", flush=True)
print("PASS", flush=True)
