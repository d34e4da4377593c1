"""The same as the installed command segnet-plan (segnet/planning/command.py says what it does)."""

from segnet.planning.command import main

if __name__ == "__main__":
    main()
