"""The same as the installed command segnet-preprocess (segnet/preprocessing/command.py says what it does)."""

from segnet.preprocessing.command import main

if __name__ == "__main__":
    main()
