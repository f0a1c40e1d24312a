"""BERT fine-tuned for classification (Devlin et al. 2019, section 4): the bert family's body under a task head,
a linear classifier on the pooled ``[CLS]`` state (or on the mean or max of the token states). ``config.py``
(torch-free), ``model.py``, ``spec.py``; trained by the classify stage, from scratch or from a pre-trained
checkpoint (``classify.init``)."""
