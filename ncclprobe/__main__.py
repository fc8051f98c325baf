"""`python -m ncclprobe` is the same as the `ncclprobe` console script."""

from ncclprobe.cli import main

if __name__ == "__main__":
    main()
