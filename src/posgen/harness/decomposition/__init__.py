"""decomposition"""
