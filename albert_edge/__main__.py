"""``python -m albert_edge``: the albert-edge command line."""

from .cli import main

if __name__ == "__main__":  # importing this module (as documentation tools do) runs nothing
    main(prog_name="albert-edge")
