"""The same as the installed command segnet-predict (segnet/commands.py says what it does)."""

from segnet.commands import segnet_predict

if __name__ == "__main__":
    segnet_predict()
