"""hf_posgen"""
