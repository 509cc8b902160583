import sys

if __name__ == "__main__":
    if sys.platform not in ("linux", "darwin"):  # checked before anything POSIX-only is imported
        print(
            f"error: the autograder needs Linux to grade (namespaces, resource limits), and a POSIX system for "
            f"its other commands; this is {sys.platform}. Use WSL 2, a Linux virtual machine or a Linux "
            "container with this repository inside.",
            file=sys.stderr,
        )
        raise SystemExit(2)
    from autograder.commands.cli import main

    raise SystemExit(main())
