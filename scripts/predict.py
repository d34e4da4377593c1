"""The same as the installed command segnet-predict (segnet/inference/command.py says what it does)."""

from segnet.inference.command import main

if __name__ == "__main__":
    main()
