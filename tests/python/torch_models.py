"""Small PyTorch models shared by the tests of tracecache.torch (tests/python/test_torch*.py).

`Bert` is a BERT-style encoder built from torch.nn layers: word, position and token-type
embeddings, LayerNorm, nn.TransformerEncoder (MultiheadAttention, GELU) with a key padding
mask, and a tanh pooler. `ZOO` lists the torchvision models of the zoo with the smallest
resolution each accepts in these tests, `zoo_model(name)` builds one seeded, in eval mode.
"""

import torch
import torchvision
from torch import nn

# Resolutions: the ResNets, MobileNet, MNASNet, SqueezeNet and VGG (five 2x2 pools) run at 32;
# AlexNet's stride-4 stem and three 3x3/2 pools need at least 63; ViT-B/16 takes image_size=32
# (four 16x16 patches plus the class token).
ZOO = {"resnet18": 32, "resnet50": 32, "resnext50_32x4d": 32, "alexnet": 64, "mobilenet_v2": 32,
       "mnasnet1_0": 32, "squeezenet1_1": 32, "vgg16": 32, "vit_b_16": 32}


def zoo_model(name, seed=0):
    torch.manual_seed(seed)
    if name == "vit_b_16":
        model = torchvision.models.vit_b_16(image_size=ZOO[name])
        # torchvision initializes the head to zeros; random values make the comparison meaningful.
        nn.init.normal_(model.heads.head.weight, std=0.02)
    else:
        model = getattr(torchvision.models, name)()
    return model.eval()


class Bert(nn.Module):
    def __init__(self, vocab=100, hidden=32, heads=4, layers=2, ffn=64, max_len=16, dropout=0.1):
        super().__init__()
        self.word = nn.Embedding(vocab, hidden)
        self.position = nn.Embedding(max_len, hidden)
        self.token_type = nn.Embedding(2, hidden)
        self.norm = nn.LayerNorm(hidden, eps=1e-12)
        layer = nn.TransformerEncoderLayer(hidden, heads, ffn, dropout=dropout, activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.pool = nn.Linear(hidden, hidden)

    def forward(self, ids, types, mask):
        positions = torch.arange(ids.shape[1]).unsqueeze(0)
        h = self.norm(self.word(ids) + self.position(positions) + self.token_type(types))
        h = self.encoder(h, src_key_padding_mask=mask == 0)
        return h, torch.tanh(self.pool(h[:, 0]))


def bert_inputs(batch=2, length=8, seed=1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 100, (batch, length), generator=g)
    types = torch.randint(0, 2, (batch, length), generator=g)
    mask = torch.ones(batch, length, dtype=torch.int64)
    mask[-1, length - 2:] = 0
    return ids, types, mask


def bert(seed=0):
    torch.manual_seed(seed)
    return Bert().eval()


def eager(model, *inputs):
    """PyTorch's outputs as a tuple, on the composite path tracecache captures: with gradients
    enabled, nn.TransformerEncoder does not take its nested-tensor fast path (which zeros the
    padded positions instead of computing them)."""
    with torch.enable_grad():
        out = model(*inputs)
    out = out if isinstance(out, tuple) else (out,)
    return tuple(o.detach() for o in out)


def relative_error(got, want):
    """max |got - want| / max |want|, as tests/cli/torch_weights.sh compares logits."""
    got = torch.as_tensor(got).double()
    want = torch.as_tensor(want).double()
    assert got.shape == want.shape, (tuple(got.shape), tuple(want.shape))
    scale = want.abs().max().item()
    return (got - want).abs().max().item() / (scale if scale else 1.0)


def run_processes(test, source, argument_lists):
    """Writes `source` as a script in a fresh directory and runs it once per entry of
    `argument_lists` in a new /usr/bin/python3 process, as `script DB HERE *arguments` (one
    cache database for all runs, HERE the tests' directory for imports). Each run must exit 0 and
    print a JSON object on its last line; returns those objects, and the directory."""
    import json
    import os
    import subprocess
    import sys
    import tempfile
    here = os.path.dirname(os.path.abspath(__file__))
    directory = tempfile.mkdtemp(dir=os.environ.get("TRACECACHE_TEST_TMP"))
    script = os.path.join(directory, "process.py")
    with open(script, "w") as f:
        f.write(source)
    db = os.path.join(directory, "cache.db")
    runs = []
    for arguments in argument_lists:
        p = subprocess.run([sys.executable, script, db, here, *arguments], capture_output=True, text=True)
        test.assertEqual(p.returncode, 0, p.stderr)
        runs.append(json.loads(p.stdout.strip().splitlines()[-1]))
    return runs, directory
