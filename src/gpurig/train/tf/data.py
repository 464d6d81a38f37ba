"""tf.data input pipelines for the TensorFlow trainer: the data sets of `TrainConfig`, read the same way.

Every pipeline is an order of sample indices, fixed by (seed, epoch), cut into global batches; each
worker keeps its slice of every global batch and splits it into per-replica batches, which
MirroredStrategy hands to its replicas in turn. So one replica on the whole batch, two replicas on
halves, and two workers on quarters see exactly the same samples per step, and a resumed run skips
exactly the batches it has already trained on. Runs only in the TensorFlow worker process.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from gpurig.train.tf.sources import DataSource, epoch_order, load_source  # noqa: F401  (re-exported)


class Pipeline:
    """Builds the per-worker, per-replica training dataset of one epoch, and the evaluation dataset."""

    def __init__(self, src: DataSource, seed: int):
        self.src = src
        self.seed = seed
        split = src.train
        self._images = tf.constant(split.images) if split.images is not None else None
        self._files = tf.constant(split.files) if split.files is not None else None
        self._labels = tf.constant(split.labels)

    def _load(self, images, files, index, epoch, augment: bool):
        """One sample (image float32 [0,1] HWC, label) by index; augmentation seeded by (seed, epoch, index)."""
        h, w, c = self.src.image_shape
        if files is not None:
            raw = tf.io.read_file(tf.gather(files, index))
            img = tf.io.decode_image(raw, channels=c, expand_animations=False)
            img = tf.image.resize(tf.cast(img, tf.float32) / 255.0, (h, w))
        else:
            img = tf.gather(images, index % tf.cast(tf.shape(images)[0], index.dtype))
            img = tf.cast(img, tf.float32)
            if images.dtype == tf.uint8:
                img = img / 255.0
            if img.shape[0] != h or img.shape[1] != w:
                img = tf.image.resize(img, (h, w))
        if augment:
            seed = tf.stack([tf.cast(self.seed * 1009 + epoch, tf.int64), tf.cast(index, tf.int64)])
            img = tf.image.stateless_random_flip_left_right(img, seed)
            pad = max(2, h // 8)
            img = tf.image.resize_with_crop_or_pad(img, h + 2 * pad, w + 2 * pad)
            img = tf.image.stateless_random_crop(img, (h, w, c), seed + 1)
        return img

    def train_epoch(
        self,
        epoch: int,
        global_batch: int,
        per_replica: int,
        worker_index: int,
        local_replicas: int,
        skip_steps: int = 0,
    ) -> tf.data.Dataset:
        """Per-replica batches of this worker for one epoch; elements go to local replicas in turn."""
        order = epoch_order(len(self.src.train), self.seed, epoch)
        steps = len(order) // global_batch
        order = order[: steps * global_batch].reshape(steps, global_batch)[skip_steps:]
        start = worker_index * local_replicas * per_replica
        mine = order[:, start : start + local_replicas * per_replica].reshape(-1, per_replica)
        ds = tf.data.Dataset.from_tensor_slices(mine)  # (per_replica,) index batches, replica-major
        images, files, labels, augment = self._images, self._files, self._labels, self.src.augment

        def load_batch(idx):
            if self.src.as_given:  # your own samples, as your tf.data.Dataset gave them
                return tf.gather(images, idx), tf.gather(labels, idx)
            if files is not None:
                imgs = tf.map_fn(lambda i: self._load(None, files, i, epoch, augment), idx,
                                 fn_output_signature=tf.float32)
            elif augment:
                imgs = tf.map_fn(lambda i: self._load(images, None, i, epoch, augment), idx,
                                 fn_output_signature=tf.float32)
            else:
                imgs = tf.cast(tf.gather(images, idx % tf.cast(tf.shape(images)[0], idx.dtype)), tf.float32)
                if images.dtype == tf.uint8:
                    imgs = imgs / 255.0
                h, w, _ = self.src.image_shape
                if imgs.shape[1] != h or imgs.shape[2] != w:
                    imgs = tf.image.resize(imgs, (h, w))
            return imgs, tf.gather(labels, idx)

        # deterministic=True keeps batch order fixed, which exact resume and verification rely on.
        ds = ds.map(load_batch, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        return ds.prefetch(tf.data.AUTOTUNE)

    def steps_per_epoch(self, global_batch: int) -> int:
        return len(self.src.train) // global_batch

    def eval_dataset(self, batch: int = 256) -> tf.data.Dataset | None:
        test = self.src.test
        if test is None or len(test) == 0:
            return None
        if self.src.as_given:
            return tf.data.Dataset.from_tensor_slices((test.images, test.labels)).batch(batch).prefetch(tf.data.AUTOTUNE)
        h, w, c = self.src.image_shape
        if test.files is not None:
            files = tf.constant(test.files)

            def load(i):
                raw = tf.io.read_file(tf.gather(files, i))
                img = tf.io.decode_image(raw, channels=c, expand_animations=False)
                return tf.image.resize(tf.cast(img, tf.float32) / 255.0, (h, w))

            ds = tf.data.Dataset.range(len(test)).map(load, num_parallel_calls=tf.data.AUTOTUNE)
            ds = tf.data.Dataset.zip((ds, tf.data.Dataset.from_tensor_slices(test.labels)))
            return ds.batch(batch).prefetch(tf.data.AUTOTUNE)
        images = test.images
        scale = 255.0 if images.dtype == np.uint8 else 1.0

        def prep(x, y):
            x = tf.cast(x, tf.float32) / scale
            if x.shape[1] != h or x.shape[2] != w:
                x = tf.image.resize(x, (h, w))
            return x, y

        ds = tf.data.Dataset.from_tensor_slices((images, test.labels)).batch(batch)
        return ds.map(prep, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
