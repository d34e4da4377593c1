"""The same as the installed command segnet-preprocess (segnet/commands.py says what it does)."""

from segnet.commands import segnet_preprocess

if __name__ == "__main__":
    segnet_preprocess()
