"""The same as the installed command segnet-export (segnet/export/command.py says what it does)."""

from segnet.export.command import main

if __name__ == "__main__":
    main()
