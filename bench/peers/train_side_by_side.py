#!/usr/bin/python3
"""Training steps, PyTorch 1.13 eager and tracecache once mode side by side (issue 17).

For every (batch, threads) and zoo model: a PyTorch eager training step (torchvision's model,
or torch_peer.py's BERT, in train mode; cross_entropy of the logits, BERT: of the pooler output,
on fixed random labels; backward; torch.optim.SGD lr 0.01 momentum 0.9; loss.item()) against
`tracecache zoo train MODEL --optimizer sgd --momentum 0.9 --lr 0.01 --mode once` (the same
step as one graph: forward, loss, backward, update), measured in interleaved rounds so the
ratio is taken under the same load. At more than one thread each side also runs with its
other OMP wait policy and the faster counts. This is side_by_side.py's machinery (workers,
rounds, tables, JSON) with side_by_side.TRAINING; see bench/peers/README.md.

Run with Debian's interpreter, which has python3-torch:
    /usr/bin/python3 bench/peers/train_side_by_side.py --quick
    /usr/bin/python3 bench/peers/train_side_by_side.py --models resnet18 --threads 2 --tc-lazy
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import side_by_side  # noqa: E402

if __name__ == "__main__":
    sys.exit(side_by_side.main(bench=side_by_side.TRAINING))
