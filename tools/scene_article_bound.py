#!/usr/bin/env python3
"""How many scenes a caption could match exactly if it named articles only as well as a classifier.

Exact scene match needs every article of a scene named right. Each article of `vitk make-scenes`'s
test scenes is a Fashion-MNIST test image (its index is the scene's `vitk_scene.objects[].article`),
so a classifier's predictions on that split bound the figure: a scene counts when the classifier
gets all of its articles right. Standard library only.

    vitk export-samples --data /usr/share/datasets/fashion-mnist --count 10000 --out /tmp/fm
    vitk classify --dir /tmp/fm --top-k 1 --json > /tmp/fm.json     # the bundled classifier
    python3 tools/scene_article_bound.py data/scenes/captions_test.json /tmp/fm.json
"""
import json
import os
import re
import sys


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    captions, predictions = sys.argv[1], sys.argv[2]
    with open(captions, encoding="utf-8") as f:
        images = json.load(f)["images"]
    with open(predictions, encoding="utf-8") as f:
        classified = json.load(f)
    # export-samples names the files INDEX-class-name.png; the name is the true class.
    right = {}
    for path, result in classified.items():
        m = re.fullmatch(r"(\d+)-(.+)\.png", os.path.basename(path))
        if not m:
            sys.exit(f"{predictions}: {path} is not named like export-samples's INDEX-class.png")
        label = re.sub(r"[^a-z]+", "-", result["labels"][0].lower()).strip("-")
        right[int(m.group(1))] = label == m.group(2)
    articles = scenes = articles_right = scenes_right = 0
    for image in images:
        objects = image["vitk_scene"]["objects"]
        try:
            good = [right[o["article"]] for o in objects]
        except KeyError as e:
            sys.exit(f"{predictions}: no prediction for Fashion-MNIST test image {e}")
        articles += len(good)
        articles_right += sum(good)
        scenes += 1
        scenes_right += all(good)
    print(f"articles classified right: {articles_right} of {articles} ({100 * articles_right / articles:.2f}%)")
    print(f"scenes with every article right: {scenes_right} of {scenes} ({100 * scenes_right / scenes:.2f}%)")


if __name__ == "__main__":
    main()
