"""One rank of a test scenario (see ranks.py): argv = test file, scenario name,
settings (JSON), arguments (JSON). Prints 'RESULT <json>' and exits 0."""

import importlib.util
import json
import sys

import ofccl


def main():
    path, name, settings, args = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), \
        json.loads(sys.argv[4])
    spec = importlib.util.spec_from_file_location("scenario_module", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    fn = getattr(mod, name)
    if getattr(fn, "no_comm", False):  # the scenario builds its own objects
        result = fn(settings, *args)
    else:
        ctx = ofccl.Context(settings)
        comm = ctx.world()
        result = fn(comm, *args)  # an exception exits 1 with its traceback
        # Teardown must succeed too: every object the scenario made is gone.
        comm.close()
        del comm
        ctx.close()
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
