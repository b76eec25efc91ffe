"""A stand-in for verifiers_bridge.py that breaks the protocol on purpose (test_verifiers_client.py).

Run as ``fake_verifiers_bridge.py -P BRIDGE REQ_FD ANS_FD`` (the arguments the adapter gives the
real bridge). It answers ``load`` properly, then answers each other request as the file named by
``$FAKE_BRIDGE_MODE_FILE`` says at that moment: ``ok``, ``malformed``, ``not_object``, ``huge``,
``wrong_id``, ``two_lines``, ``exit``, ``hang``, ``stdout`` (a forged answer on descriptor 1, then
the real one).
"""

import json
import os
import sys
import time


def main() -> None:
    requests, answers = os.fdopen(int(sys.argv[3])), os.fdopen(int(sys.argv[4]), "w")
    mode_file = os.environ["FAKE_BRIDGE_MODE_FILE"]
    for line in requests:
        req = json.loads(line)
        good = json.dumps(
            {"ok": True, "id": req["id"], "num_tasks": 1, "rewards": [], "pid": os.getpid()}
        )
        mode = "ok" if req["op"] == "load" else open(mode_file).read().strip()
        if mode == "malformed":
            answers.write("this is not JSON\n")
        elif mode == "not_object":
            answers.write("[1, 2]\n")
        elif mode == "huge":
            answers.write("x" * (17 << 20))  # no newline: a line that never ends
        elif mode == "wrong_id":
            answers.write(json.dumps({"ok": True, "id": req["id"] + 1}) + "\n")
        elif mode == "two_lines":
            answers.write(good + "\n" + good + "\n")
        elif mode == "exit":
            print("the fake bridge exits", file=sys.stderr)
            sys.exit(3)
        elif mode == "hang":
            time.sleep(3600)
        elif mode == "stdout":
            os.write(1, (json.dumps({"ok": True, "id": req["id"], "forged": True}) + "\n").encode())
            answers.write(good + "\n")
        else:
            answers.write(good + "\n")
        answers.flush()


if __name__ == "__main__":
    main()
