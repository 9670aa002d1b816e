"""Small local docs shaped like the hub datasets of HellaSwag and ARC (the hub is
unreachable in tests): the real lm-eval task configs load them through ``json``."""

from __future__ import annotations

HELLASWAG_DOCS = [
    {
        "ind": 24 + i,
        "activity_label": label,
        "ctx_a": ctx_a,
        "ctx_b": ctx_b,
        "ctx": f"{ctx_a} {ctx_b}",
        "endings": endings,
        "source_id": f"activitynet~v_{i}",
        "split": "val",
        "split_type": "indomain",
        "label": str(i % 4),
    }
    for i, (label, ctx_a, ctx_b, endings) in enumerate(
        [
            (
                "Roof shingle removal",
                "A man is sitting on a roof with a long pry bar in his hand "
                "and begins pulling up the old shingles one after another.",
                "he",
                [
                    "is using wrap to wrap a pair of skis.",
                    "is ripping level tiles off.",
                    "is holding a rubik's cube.",
                    "starts pulling up roofing on a roof.",
                ],
            ),
            (
                "Clean and jerk",
                "A lady walks to a barbell in the middle of a bright gym and "
                "she bends down and grabs the pole with both of her hands.",
                "the lady",
                [
                    "swings and lands in her arms.",
                    "pulls the barbell forward.",
                    "pulls a rope attached to the barbell.",
                    "stands and lifts the weight over her head.",
                ],
            ),
            (
                "Canoeing",
                "Two women in a child are shown in a canoe while a man pulls the canoe "
                "while standing in the water, with other individuals visible in the background.",
                "the child and a different man",
                [
                    "are then shown paddling down a river in a boat while a woman talks.",
                    "are driving the canoe, they go down the river flowing side to side.",
                    "sit in a canoe while the man paddles.",
                    "walking go down the rapids.",
                ],
            ),
            (
                "Making a sandwich",
                "A woman lays two slices of bread on a wooden board in a small "
                "kitchen and spreads butter evenly across both of them with a knife.",
                "she",
                [
                    "adds cheese and ham and closes the sandwich.",
                    "throws the bread into a lake.",
                    "paints the wall of the kitchen blue.",
                    "drives a car down the street.",
                ],
            ),
            (
                "Washing a dog",
                "A large brown dog stands in a metal tub in the back yard while a "
                "young boy pours warm water over its back from a red bucket.",
                "the boy",
                [
                    "rubs shampoo into the fur.",
                    "flies a kite over the house.",
                    "reads a book on the sofa.",
                    "plays a violin in a concert hall.",
                ],
            ),
        ]
    )
]

ARC_DOCS = [
    {
        "id": f"Mercury_{7000 + i}",
        "question": q,
        "answerKey": key,
        "choices": {"text": choices, "label": ["A", "B", "C", "D"]},
    }
    for i, (q, choices, key) in enumerate(
        [
            (
                "Which property of a mineral can be determined just by looking at it and comparing "
                "it with other samples in the same collection?",
                ["luster", "mass", "weight", "hardness"],
                "A",
            ),
            (
                "A student riding a bicycle observes that it moves faster on a smooth road than on "
                "a rough road. This happens because the smooth road has",
                ["less gravity", "more gravity", "less friction", "more friction"],
                "C",
            ),
            (
                "Which of these would most likely help a plant grow taller in a sunny garden over "
                "the course of a long and warm summer season?",
                ["more sunlight", "less water", "colder air", "fewer leaves"],
                "A",
            ),
            (
                "Which form of energy is produced when a rubber band vibrates quickly back and "
                "forth after a child plucks it with a finger?",
                ["chemical", "light", "electrical", "sound"],
                "D",
            ),
            (
                "What is the main function of the roots of a tree that grows in the soil of a "
                "forest where many other trees also grow?",
                ["make food", "absorb water", "produce seeds", "attract insects"],
                "B",
            ),
        ]
    )
]
