"""Run by test_close_race.py in a subprocess: a SIGALRM handler raises Boom
whenever the interrupted code is inside the deepinfer package (so the test's own
bookkeeping is never hit) while the main thread iterates requests."""

import os
import signal
import sys

import deepinfer
from deepinfer import Done, Tokens


class Boom(Exception):
    pass


PKG = os.path.dirname(deepinfer.__file__)
THREADING = os.path.dirname(os.__file__)  # cv.wait inside the binding


def handler(sig, frame):
    f = frame
    while f is not None:
        fn = f.f_code.co_filename
        if fn.startswith(PKG):
            raise Boom()
        if not fn.startswith(THREADING):
            return
        f = f.f_back


def main():
    eng = deepinfer.Engine(os.environ["DI_TEST_TINY"], n_threads=1, max_running=8, n_batch=64)
    prompts = [[(7 * i + j) % 512 for j in range(5 + i)] for i in range(8)]
    kw = dict(temperature=0, max_tokens=24, ignore_eos=True)
    want = [[t for ev in eng.submit(p, **kw) if isinstance(ev, Tokens) for t in ev.ids]
            for p in prompts]
    booms = 0
    signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, 0.0005, 0.0005)
    for rnd in range(6):
        reqs = []
        for p in prompts:
            while True:
                try:
                    reqs.append(eng.submit(p, **kw))
                    break
                except Boom:  # raised before or after di_submit: resubmitting is safe
                    booms += 1  # when it was after, that request is simply not iterated
        events = [[] for _ in reqs]
        for i, r in enumerate(reqs):
            while True:
                try:
                    for ev in r:
                        events[i].append(ev)
                    break
                except Boom:
                    booms += 1
        for i, evs in enumerate(events):
            dones = [ev for ev in evs if isinstance(ev, Done)]
            assert len(dones) == 1 and evs[-1] is dones[0], (rnd, i, evs[-3:])
            ids = [t for ev in evs if isinstance(ev, Tokens) for t in ev.ids]
            assert ids == want[i], (rnd, i, ids, want[i])
    signal.setitimer(signal.ITIMER_REAL, 0, 0)
    signal.signal(signal.SIGALRM, signal.SIG_IGN)
    eng.close()
    print(f"ok booms={booms}")


if __name__ == "__main__":
    sys.exit(main())
