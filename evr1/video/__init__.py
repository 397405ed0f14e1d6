"""evr1.video"""
