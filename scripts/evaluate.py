"""The same as the installed command segnet-evaluate (segnet/evaluation/command.py says what it does)."""

from segnet.evaluation.command import main

if __name__ == "__main__":
    main()
