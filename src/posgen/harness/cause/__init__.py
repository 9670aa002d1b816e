"""``posgen cause``: does the additive form of the logits explain position tolerance?"""
