"""Entry point of an attacker process (run as nobody by harness.Attacker).

    attacker.py MODULE FUNCTION JSON-KWARGS

calls MODULE.FUNCTION(socket, namespace, **kwargs) and prints the dict it
returns as one JSON line: the driver asserts on it. The attack itself only
records what the daemon answered; it decides nothing.
"""
import importlib
import json
import os
import sys


def main():
    module, function, kwargs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    attack = getattr(importlib.import_module(module), function)
    result = attack(os.environ["MEMD_SOCKET"], os.environ["MEMD_SHM_NAMESPACE"], **kwargs)
    result.setdefault("uid", os.getuid())
    print(json.dumps(result))


if __name__ == "__main__":
    main()
