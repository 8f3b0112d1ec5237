"""``python -m bench``: the one benchmark command."""

from bench import run

# Guarded: multiprocessing's spawn start method re-imports the main module.
if __name__ == "__main__":
    raise SystemExit(run.main())
