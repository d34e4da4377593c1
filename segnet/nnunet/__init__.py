"""nnU-Net v2's trained models in segnet: their folders read (segnet.nnunet.folder, .plans), their
checkpoints loaded weights-only (.checkpoint), their networks built by the package nnU-Net builds
them with, dynamic_network_architectures (.network: the `peer` extra), and each fold as a
TrainedModel that segnet-predict ensembles like its own (.model). segnet's core imports none of it
but through segnet-predict's model=DIR and model.init_from."""
